"""Probe 2: which C handler owns SIGUSR1 after a CUDA compile, and do other signals survive?"""
import ctypes, faulthandler, os, signal, sys, time
f = open(sys.argv[1], "w")
RT = signal.SIGRTMIN + 3
SIGS = {"USR1": signal.SIGUSR1, "USR2": signal.SIGUSR2, "RTMIN+3": RT, "WINCH": signal.SIGWINCH}
for s in SIGS.values():
    faulthandler.register(s, file=f, all_threads=True)
libc = ctypes.CDLL(None, use_errno=True)
class SA(ctypes.Structure):
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]
def owner(addr):
    if not addr: return "SIG_DFL"
    if addr == 1: return "SIG_IGN"
    for line in open("/proc/self/maps"):
        a, rest = line.split(" ", 1)
        lo, hi = (int(x, 16) for x in a.split("-"))
        if lo <= addr < hi:
            return f"{addr:#x} in {rest.split()[-1] if len(rest.split())>4 else '?'}"
    return f"{addr:#x} ?"
def show(tag):
    for name, s in SIGS.items():
        sa = SA()
        libc.sigaction(int(s), None, ctypes.byref(sa))
        before = os.path.getsize(sys.argv[1])
        os.kill(os.getpid(), s); time.sleep(0.3)
        print(tag, name, owner(sa.handler), "flags", hex(sa.flags), "grew", os.path.getsize(sys.argv[1]) - before, flush=True)
show("start")
import torch
torch.ones(2, device="cuda"); torch.cuda.synchronize()
show("cuda")
import torch._inductor.config as ic
fn = torch.compile(lambda a: (a * 2).sin().sum())
fn(torch.randn(64, device="cuda")); torch.cuda.synchronize()
show("compiled")
os._exit(0)
