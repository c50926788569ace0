"""torch's fake CUDA device guard outliving its thread (CUDA wheel, no GPU): SIGSEGV or not.

    <python> scripts/repro_device_guard.py     # exit 0: survived; killed by SIGSEGV: the bug

FakeTensorMode.__enter__ calls torch._C._ensureCUDADeviceGuardSet() when CUDA is unavailable.
Where that stores a *thread-local* FakeGuardImpl in the process-global device-guard registry
(fixed upstream by pytorch/pytorch#178950: a function-local static), the registry dangles
once the installing thread exits, and the next thread's call dereferences it.
"""

import faulthandler
import threading

import torch

faulthandler.enable()
print(torch.__version__, "cuda available:", torch.cuda.is_available(), flush=True)
for _ in range(200):
    t = threading.Thread(target=torch._C._ensureCUDADeviceGuardSet)
    t.start()
    t.join()  # the thread's TLS (and its fake guard, where thread-local) is gone now
    junk = [bytearray(64) for _ in range(1000)]  # reuse freed memory
    torch._C._ensureCUDADeviceGuardSet()  # reads the registry's guard: deviceCount()
print("survived 200 thread exits", flush=True)
