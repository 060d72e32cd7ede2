"""conv2d forward/backward on the neuron device (trn2, LNC=2) vs torch float64 autograd over a random grid of
shapes (channels in/out, kernel sizes, stride, padding, batch, spatial sizes, groups incl. depthwise); prints
each wrong or falling-back case and a summary (issue 10.2 / 10.12). Not a pytest module: run by hand,
  PYTHONPATH=build/python python tests/frontend/conv_grad_sweep.py SEED COUNT fp32|bf16"""
import random, sys, time, torch, trnsim
trnsim.set_fallback_mode("allow")
rng = random.Random(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
count = int(sys.argv[2]) if len(sys.argv) > 2 else 200
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[3] if len(sys.argv) > 3 else "fp32"]
CH = [1, 3, 17, 64, 128, 130, 256, 511, 512, 513, 576, 640, 1000, 1024, 1030, 1088, 1536, 2048]
OC = [1, 5, 64, 96, 128, 129, 160, 256, 320, 384, 520, 1100, 2048]
K = [(1, 1), (3, 3), (1, 3), (3, 1), (5, 5), (2, 2)]
def case():
    c, o = rng.choice(CH), rng.choice(OC)
    kh, kw = rng.choice(K)
    g = rng.choice([1, 1, 1, 2, 4, "dw"])
    if g == "dw": g, o = c, c * rng.choice([1, 1, 2]) if c <= 256 else c
    if c % g or o % g: g = 1
    s = rng.choice([1, 1, 2]); p = rng.choice([0, 1, 2]) if kh > 1 else rng.choice([0, 0, 1])
    n = rng.choice([1, 2, 3]); h = rng.randint(max(1, kh - 2 * p), 7); w = rng.randint(max(1, kw - 2 * p), 7)
    if c * o * kh * kw // g > 2048 * 384 * 3: kh = kw = 1
    return n, c, h, w, o, kh, kw, s, p, g
bad = fb = 0
t0 = time.time()
for i in range(count):
    n, c, h, w, o, kh, kw, s, p, g = case()
    torch.manual_seed(i)
    x = torch.randn(n, c, h, w).to(dtype); wt = (torch.randn(o, c // g, kh, kw) / (c // g * kh * kw) ** .5).to(dtype)
    b = torch.randn(o).to(dtype)
    xd, wd, bd = [t.double().requires_grad_() for t in (x, wt, b)]
    y = torch.nn.functional.conv2d(xd, wd, bd, stride=s, padding=p, groups=g)
    dy = torch.randn(y.shape).to(dtype)
    y.backward(dy.double())
    ref = [y.detach(), xd.grad, wd.grad, bd.grad]
    xn, wn, bn = [t.to("neuron").requires_grad_() for t in (x, wt, b)]
    trnsim.reset_fallback_report()
    yn = torch.nn.functional.conv2d(xn, wn, bn, stride=s, padding=p, groups=g)
    yn.backward(dy.to("neuron"))
    got = [t.detach().cpu().double() for t in (yn, xn.grad, wn.grad, bn.grad)]
    rep = {k: v for k, v in trnsim.fallback_report().items() if "conv" in k}
    errs = []
    for name, gt, e in zip("y dx dw db".split(), got, ref):
        scale = e.abs().max().item() + 1e-6
        tol = (2e-5 if dtype == torch.float32 else 3e-2) * scale + 1e-6
        err = (gt - e).abs().max().item()
        if not err <= tol: errs.append(f"{name} err {err:.3g} (scale {scale:.3g}) zeros={(gt == 0).sum().item()}/{(e == 0).sum().item()}")
    tag = "FALLBACK " + str(rep) if rep else ""
    fb += bool(rep)
    if errs: bad += 1
    if errs or rep:
        print(f"n{n} c{c} {h}x{w} o{o} k{kh}x{kw} s{s} p{p} g{g}: {'; '.join(errs)} {tag}", flush=True)
print(f"done {count} cases, {bad} wrong, {fb} fallbacks, {time.time() - t0:.0f}s", flush=True)
