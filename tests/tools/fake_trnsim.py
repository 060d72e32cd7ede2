"""A stand-in for `trnsim` in the sweep tests, until `trnsim replay` is on this branch: the subset of
the command line that tools/sweeps/replay_sweep.py calls, with the same arguments and the same
--json report, computed deterministically from the config so that a test can predict every number.

    trnsim config show C --effective-only [--set K=V]...
    trnsim config validate C... [--set K=V]...
    trnsim replay REC --config C [--set K=V]... --timing-only [--rebuild] --json F [--force]

A config is a file of `key: value` lines (keys dotted); a bare name C is configs/C.yaml next to
this script, which a worker does not have: only a config sent by value reaches a replay there.
A recording is a directory with manifest.jsonl (one launch a line: op, kind, device, shapes,
dtype, recorded_ns) and programs/<index>.tasm for each launch. Replayed time of a launch:
    ns = recorded_ns * core.scale / core.speed + core.overhead_ns      (scale default 1, overhead 0)
A config with `fail: 1` makes the replay fail after a few lines of stderr. --rebuild changes no time
here; the report says it ran (as the real one's "rebuild" field) and counts the launches whose line
has a "kernel" (an invocation) as rebuilt, the others as not.
"""
import hashlib
import json
import pathlib
import sys

KNOWN_KEYS = {"name", "core.speed", "core.scale", "core.overhead_ns", "fail"}


def fail(message, status=1):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(status)


def parse(argv):
    positional, options, flags = [], {"--set": []}, set()
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--set", "--config", "--json"):
            if i + 1 >= len(argv):
                fail(f"{arg} needs a value", 2)
            if arg == "--set":
                options["--set"].append(argv[i + 1])
            else:
                options[arg] = argv[i + 1]
            i += 2
        elif arg.startswith("--"):
            flags.add(arg)
            i += 1
        else:
            positional.append(arg)
            i += 1
    return positional, options, flags


def load(name, overrides):
    path = pathlib.Path(name)
    if "/" not in name and not path.is_file():
        path = pathlib.Path(__file__).resolve().parent / "configs" / f"{name}.yaml"
    if not path.is_file():
        fail(f"config '{name}' not found")
    config = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition(":")
            config[key.strip()] = value.strip()
    for assignment in overrides:
        key, _, value = assignment.partition("=")
        if key not in KNOWN_KEYS:
            fail(f"--set {assignment}: unknown key '{key}'")
        config[key] = value
    for key in config:
        if key not in KNOWN_KEYS:
            fail(f"{path}: unknown key '{key}'")
    try:
        if float(config["core.speed"]) <= 0:
            raise ValueError
    except (KeyError, ValueError):
        fail(f"{path}: core.speed must be a positive number, got {config.get('core.speed')!r}")
    text = "".join(f"{k}: {config[k]}\n" for k in sorted(config))
    return path, config, text, hashlib.sha256(text.encode()).hexdigest()[:16]


def replay(positional, options, flags):
    if "--timing-only" not in flags:
        fail("this fake replays only with --timing-only", 2)
    if len(positional) != 1 or "--json" not in options:
        fail("usage: replay REC --config C [--set K=V]... --timing-only --json F", 2)
    rec = pathlib.Path(positional[0])
    manifest = rec / "manifest.jsonl"
    if not manifest.is_file():
        fail(f"{rec} is not a recording (no manifest.jsonl)")
    path, config, _, config_hash = load(options.get("--config", "trn2"), options["--set"])
    out = pathlib.Path(options["--json"])
    if out.exists() and "--force" not in flags:
        fail(f"{out} exists (pass --force to overwrite)")
    if config.get("fail") == "1":
        for i in range(30):
            print(f"fake trace line {i}", file=sys.stderr)
        fail(f"fake replay failed on launch 2 of {rec.name}", 3)
    speed, overhead = float(config["core.speed"]), float(config.get("core.overhead_ns", 0))
    scale = float(config.get("core.scale", 1))
    launches, per_op = [], {}
    for index, line in enumerate(manifest.read_text().splitlines()):
        launch = json.loads(line)
        if not (rec / "programs" / f"{index}.tasm").is_file():
            fail(f"{rec}: launch {index} has no program")
        ns = launch["recorded_ns"] * scale / speed + overhead
        launches.append({"index": index, **launch, "ns": ns})
        op = per_op.setdefault(launch["op"], {"count": 0, "recorded_ns": 0.0, "ns": 0.0})
        op["count"] += 1
        op["recorded_ns"] += launch["recorded_ns"]
        op["ns"] += ns
    report = {"recording": str(rec),
              "config": {"name": config.get("name", path.stem), "source": str(path), "overrides": options["--set"],
                         "hash": config_hash},
              "recorded_config_hash": "0123456789abcdef", "rebuild": "--rebuild" in flags,
              "launches": launches, "per_op": per_op,
              "total_ns": sum(l["ns"] for l in launches),
              "recorded_total_ns": sum(l["recorded_ns"] for l in launches), "host_s": 0.001}
    if "--rebuild" in flags:  # a launch line with "kernel" counts as carrying its invocation
        rebuilt = sum("kernel" in json.loads(line) for line in manifest.read_text().splitlines())
        report.update(rebuilt_launches=rebuilt, not_rebuilt_launches=len(launches) - rebuilt)
    out.write_text(json.dumps(report, indent=1) + "\n")


def main(argv):
    positional, options, flags = parse(argv)
    if positional[:2] == ["config", "show"] and "--effective-only" in flags:
        _, _, text, _ = load(positional[2], options["--set"])
        sys.stdout.write("# fake effective config\n" + text)
    elif positional[:2] == ["config", "validate"]:
        for name in positional[2:]:
            path, config, _, config_hash = load(name, options["--set"])
            print(f"ok  {path}  ({config.get('name', path.stem)}, hash {config_hash})")
    elif positional[:1] == ["replay"]:
        replay(positional[1:], options, flags)
    else:
        fail(f"the fake trnsim does not do {' '.join(argv)}", 2)


if __name__ == "__main__":
    main(sys.argv[1:])
