"""Plain PyTorch on the simulated device: a small MLP trained for a few SGD steps on trn2 and trn3.

The same steps run on the CPU; the losses must agree. For each generation it prints the simulated
time of a training step, the ops that took most of it (from trnsim.op_log()) and any op that fell
back to the CPU.

    .venv/bin/python examples/mlp_training.py [--steps 5] [--batch 256] [--width 1024]
"""
import argparse
import collections

import torch

import trnsim


def make_model(width):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.ReLU(), torch.nn.Linear(4 * width, width))


def train(device, steps, batch, width):
    model = make_model(width).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, foreach=False)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(batch, width, generator=generator).to(device)
        target = torch.randn(batch, width, generator=generator).to(device)
        loss = torch.nn.functional.mse_loss(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()

    cpu_losses = train("cpu", args.steps, args.batch, args.width)
    print(f"MLP {args.width}->{4 * args.width}->{args.width}, batch {args.batch}, fp32, "
          f"{args.steps} SGD steps")
    for config in ("trn2", "trn3"):
        trnsim.set_config(config)
        trnsim.reset_simulated_time()
        trnsim.reset_fallback_report()
        losses = train("neuron", args.steps, args.batch, args.width)
        worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, cpu_losses))
        total_ns = trnsim.simulated_ns()
        by_op = collections.defaultdict(lambda: [0, 0.0])
        for record in trnsim.op_log():
            by_op[record["op"]][0] += 1
            by_op[record["op"]][1] += record["ns"]
        print(f"\n{config}: simulated {total_ns / 1e3:.1f} us for {args.steps} steps "
              f"({total_ns / 1e3 / args.steps:.1f} us per step); losses {losses[0]:.4f} -> {losses[-1]:.4f}, "
              f"max relative difference to the CPU {worst:.1e}")
        for op, (count, ns) in sorted(by_op.items(), key=lambda item: -item[1][1])[:6]:
            print(f"  {op:<28} {count:>4} calls {ns / 1e3:>10.1f} us {100 * ns / total_ns:>5.1f}%")
        fallbacks = trnsim.fallback_report()
        print(f"  fallback ops: {sum(fallbacks.values())} {dict(fallbacks) if fallbacks else ''}")


if __name__ == "__main__":
    main()
