"""Two GPUs under the shim: a DDP training step with an all-reduce per rank (torchrun). Each rank
prints its device, the all-reduce result and the capped total it sees."""
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
for step in range(20):
    x = torch.randn(256, 4096, device="cuda")
    loss = ddp(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
t = torch.ones(1, device="cuda") * (rank + 1)
dist.all_reduce(t)
print(f"rank {rank} device {torch.cuda.current_device()} allreduce {t.item()} "
      f"total {torch.cuda.mem_get_info()[1]} loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
