"""A program's instruction mix, read from its ``.tasm`` text without running it (issue 37 item 1: checkable lowering):
instructions per engine and opcode, bytes moved by DMA, matmul FLOPs. ``Kernel.explain(*args)`` and
``python -m trnsim.nki --explain FILE.py:KERNEL ARG...`` print it for a traced kernel; ``mix_of_tasm`` reads any
program (a hand-written one too), so the two can be compared.

Counts are static: a compiled loop's body (``while_begin`` / ``loop_begin`` ... end) is counted once, however many
times it runs. An instruction's engine is its ``engine=`` operand, else the first engine its ISA table line names
(isa/instructions.def), as the .tasm parser chooses it. DMA bytes are each DMA's destination elements times their
dtype's size (dma_copy / dma_transpose / dma_gather / dma_scatter, whatever the queue); matmul FLOPs are
2 * K * M * N per nc_matmul (stationary [K, M], moving [K, N])."""
import re
from math import prod as _prod

from . import _core, _emit

_DMA_OPCODES = frozenset({"dma_copy", "dma_transpose", "dma_gather", "dma_scatter"})
_DECL = re.compile(r"^(hbm|sbuf|psum)\s+(\w+)\s*:\s*(\w+)\[([^\]]*)\]")
_SIZES = {d.name: d.size_bytes for d in _core.DTYPES.values()}


class InstructionMix:
    """``engines``: {engine: {opcode: count}}; ``dma_bytes``; ``matmul_flops``; ``instructions`` (all)."""

    def __init__(self, name=""):
        self.name = name
        self.engines = {}
        self.dma_bytes = 0
        self.matmul_flops = 0
        self.instructions = 0

    def add(self, engine, opcode):
        ops = self.engines.setdefault(engine, {})
        ops[opcode] = ops.get(opcode, 0) + 1
        self.instructions += 1

    def per_engine(self):
        """{engine: instructions}."""
        return {e: sum(ops.values()) for e, ops in sorted(self.engines.items())}

    def per_opcode(self):
        out = {}
        for ops in self.engines.values():
            for op, n in ops.items():
                out[op] = out.get(op, 0) + n
        return dict(sorted(out.items()))

    def as_dict(self):
        return {"name": self.name, "instructions": self.instructions,
                "engines": {e: dict(sorted(ops.items())) for e, ops in sorted(self.engines.items())},
                "dma_bytes": self.dma_bytes, "matmul_flops": self.matmul_flops}

    def __eq__(self, other):
        if not isinstance(other, InstructionMix):
            return NotImplemented
        a, b = self.as_dict(), other.as_dict()
        a.pop("name"), b.pop("name")
        return a == b

    def __str__(self):
        lines = [f"{self.name or 'program'}: {self.instructions:,} instructions (static count: a compiled loop's "
                 f"body once)", f"  {'engine':<8} {'opcode':<24} {'count':>9}"]
        for engine, ops in sorted(self.engines.items()):
            for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])):
                lines.append(f"  {engine:<8} {op:<24} {n:>9,}")
            lines.append(f"  {engine:<8} {'(all)':<24} {sum(ops.values()):>9,}")
        lines.append(f"  DMA bytes: {self.dma_bytes:,}")
        lines.append(f"  matmul FLOPs: {self.matmul_flops:,}")
        return "\n".join(lines)

    __repr__ = __str__


def _split_operands(text):
    """'a=x{..., ap=[[0, 1]]}, b=y' -> [('a', 'x{...}'), ('b', 'y')] (commas inside brackets kept)."""
    out, depth, start = [], 0, 0
    for i, c in enumerate(text + ","):
        if c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        elif c == "," and depth == 0:
            part = text[start:i].strip()
            if part:
                key, _, value = part.partition("=")
                out.append((key.strip(), value.strip()))
            start = i + 1
    return out


def _extent(tensors, operand):
    """(partitions, elements, dtype size) of a tensor operand in any of the .tasm forms: a bare name, a slice
    ``t[0:128, 4]``, or the raw access pattern ``t{offset=0, dtype=bf16, ap=[[s, n], ...]}``."""
    m = re.match(r"^(\w+)\s*([\[{].*)?$", operand)
    if not m:
        return None
    name, rest = m.group(1), (m.group(2) or "")
    if name not in tensors:
        return None   # a number, an enum word, a register
    dtype, shape = tensors[name]
    if rest.startswith("{"):
        as_dtype = re.search(r"dtype=(\w+)", rest)
        pairs = [(int(a), int(b)) for a, b in re.findall(r"\[\s*(-?\d+)\s*,\s*(\d+)\s*\]", rest.split("ap=", 1)[1])]
        size = _SIZES[as_dtype.group(1)] if as_dtype else _SIZES[dtype]
        counts = [n for _, n in pairs]
        return counts[0], _prod(counts), size
    counts = list(shape)
    if rest.startswith("["):
        keys = [k.strip() for k in rest[1:-1].split(",")]
        for d, key in enumerate(keys):
            if ":" in key:
                bits = (key.split(":") + [""])[:3]
                start = int(bits[0]) if bits[0] else 0
                stop = int(bits[1]) if bits[1] else shape[d]
                step = int(bits[2]) if bits[2] else 1
                counts[d] = len(range(start, stop, step))
            else:
                counts[d] = 1
    return counts[0], _prod(counts), _SIZES[dtype]


def mix_of_tasm(text, name=None):
    """The InstructionMix of a ``.tasm`` program's text."""
    specs = _emit.specs()
    tensors = {}
    mix = InstructionMix(name or "")
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        word = line.split(None, 1)[0]
        if word == "kernel":
            mix.name = name or line.split(None, 1)[1].strip()
            continue
        if word == "target":
            continue
        decl = _DECL.match(line)
        if decl:
            shape = [int(n) for n in decl.group(4).split(",") if n.strip()] or [1]
            tensors[decl.group(2)] = (decl.group(3), shape)
            continue
        spec = specs.get(word)
        if spec is None:
            raise ValueError(f"line {raw!r}: {word!r} is not an instruction")
        operands = dict(_split_operands(line[len(word):]))
        engine = operands.get("engine") or spec["engines"][0][0]
        mix.add(engine, word)
        if word in _DMA_OPCODES:
            extent = _extent(tensors, operands.get("dst", ""))
            if extent:
                mix.dma_bytes += extent[1] * extent[2]
        elif word == "nc_matmul":
            stationary = _extent(tensors, operands.get("stationary", ""))
            moving = _extent(tensors, operands.get("moving", ""))
            if stationary and moving:
                k = stationary[0]
                mix.matmul_flops += 2 * k * (stationary[1] // k) * (moving[1] // k)
    return mix
