"""A quick real-GPU smoke run of the CUDA face under PyTorch: the cap and a short GPT-2 loop.
Prints `key value` lines. Run by hand through the device tool; scripts/gpu-check.sh is the full
check."""
import os, sys, time

import torch

mode = sys.argv[1]
if mode == "cap":
    free, total = torch.cuda.mem_get_info()
    print("mem_get_info_total", total)
    print("props_total", torch.cuda.get_device_properties(0).total_memory)
    held = []
    try:
        for _ in range(64):
            held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
        print("oom_raised 0")
    except torch.OutOfMemoryError:
        print("oom_raised 1")
    print("held_gib", len(held))
    del held[:3]
    torch.cuda.empty_cache()
    held.append(torch.full((1 << 30,), 3, dtype=torch.uint8, device="cuda"))
    print("after_free_ok", int(bool((held[-1][: 1 << 20] == 3).all().item())))
    print("held_gib_after", len(held))
elif mode == "reuse":
    # A slow kernel on a side stream writes into `a`; `a` dies at once and `b` of the same size
    # is filled on the default stream. A pool that hands a's block to b without waiting for the
    # side stream corrupts b.
    s = torch.cuda.Stream()
    x = torch.randn(4096, 4096, device="cuda")
    bad = 0
    for _ in range(int(os.environ.get("ROUNDS", "100"))):
        a = torch.empty(4096, 4096, device="cuda")
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(8):
                torch.mm(x, x, out=a)
        del a
        b = torch.full((4096, 4096), 7.0, device="cuda")
        torch.cuda.synchronize()
        bad += int((b != 7.0).sum().item())
    print("reuse_corrupted_elements", bad)
elif mode == "swap":
    # Models of different sizes moved to the GPU and back in turn, as video pipelines do.
    import torch.nn as nn
    torch.manual_seed(0)
    models = [nn.Sequential(*[nn.Linear(w, w) for _ in range(12)]) for w in (3072, 4096, 2560, 3584)]
    for _ in range(3):
        for m in models:
            m.cuda()
            with torch.no_grad():
                y = m(torch.randn(256, m[0].in_features, device="cuda"))
            y.sum().item()
            m.cpu()
    print("swap_done 1")
    print("max_allocated", torch.cuda.max_memory_allocated())
    print("max_reserved", torch.cuda.max_memory_reserved())
elif mode == "gpt2":
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = GPT2LMHeadModel(GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    batch = torch.randint(0, 50257, (8, 1024), generator=g).cuda()
    times = []
    for step in range(int(os.environ.get("STEPS", "12"))):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        print("loss", step, repr(loss.item()))
    steady = sorted(times[3:])
    print("median_step_ms", 1000 * steady[len(steady) // 2])
    print("max_allocated", torch.cuda.max_memory_allocated())
    print("max_reserved", torch.cuda.max_memory_reserved())
