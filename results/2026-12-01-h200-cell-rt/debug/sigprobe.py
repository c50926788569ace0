"""Probe: does a faulthandler SIGUSR1 dump land, before/after torch+CUDA+compile? (py3.12, GPU)"""
import faulthandler, os, signal, sys, threading, time
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
path = sys.argv[1]
f = open(path, "w")
faulthandler.enable(file=f, all_threads=True)
faulthandler.register(signal.SIGUSR1, file=f, all_threads=True)

def masks(tag):
    out = []
    for tid in sorted(os.listdir("/proc/self/task")):
        st = open(f"/proc/self/task/{tid}/status").read().splitlines()
        d = {l.split(":")[0]: l.split(":")[1].strip() for l in st if l.startswith(("SigBlk", "SigIgn", "SigCgt", "Name"))}
        out.append(f"{tid} {d}")
    print(tag, "\n  " + "\n  ".join(out), flush=True)

def probe(tag):
    before = os.path.getsize(path)
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.3)
    # a signal from another process, like the runner's
    os.system(f"kill -USR1 {os.getpid()}")
    time.sleep(0.5)
    print(tag, "grew", os.path.getsize(path) - before, flush=True)
    masks(tag)

probe("bare")
import torch
probe("import torch")
torch.cuda.init(); x = torch.ones(4, device="cuda"); torch.cuda.synchronize()
probe("cuda")
fn = torch.compile(lambda a: (a * 2).sin().sum())
fn(torch.randn(64, device="cuda")); torch.cuda.synchronize()
probe("compiled")
ev = threading.Event()
t = threading.Thread(target=ev.wait, name="waiter"); t.start()
probe("with thread")
ev.set(); t.join()
import subprocess
print(subprocess.run(["python3", "-c", "import sys; print(sys.version)"], capture_output=True, text=True).stdout)
os._exit(0)
