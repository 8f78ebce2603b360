#!/usr/bin/env python3
"""The report of bench/lora_13b.sh: reads WORKDIR/run/metrics.jsonl, WORKDIR/time.txt (GNU
time -v), WORKDIR/plan.json (strata plan --json) and WORKDIR/fio_read_bps, and prints the
steady steps' (the second on: the first also fills the NVMe cache) mean step time and where it
went, peak RSS, the drive's bytes per step against the plan's and its least, and drive_ratio,
ending with one JSON line.

  python3 bench/lora_13b_report.py WORKDIR
"""
import json
import re
import sys

work = sys.argv[1]
steps = [json.loads(l) for l in open(f"{work}/run/metrics.jsonl")]
steady = [s for s in steps if s["step"] >= 2]
mean = lambda f: sum(f(s) for s in steady) / len(steady)
wall = mean(lambda s: s["timeline"]["wall_s"])
busy = {k: mean(lambda s, k=k: s["timeline"]["busy_s"][k]) for k in ("compute", "comm", "h2d", "cpu_adam", "d2h")}
n2h = mean(lambda s: s["timeline"]["bytes"]["n2h"])
h2d = mean(lambda s: s["timeline"]["bytes"]["h2d"])
rss_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(f"{work}/time.txt").read()).group(1))
plan = json.load(open(f"{work}/plan.json"))["plan"]
row = next(r for r in plan if r["stage"] == 3 and r["offload"] == "cpu+param-nvme" and r["checkpointing"])
fio = float(open(f"{work}/fio_read_bps").read())
bound = n2h / fio
print(f"steps {steps[0]['step']}-{steps[-1]['step']}, loss {steps[0]['loss']:.4f} -> {steps[-1]['loss']:.4f}; "
      f"steady steps {len(steady)}: {wall:.1f} s each, {512 / wall:.2f} tokens/s")
print(f"busy: compute {busy['compute']:.1f} s, gathers (comm) {busy['comm']:.1f} s, "
      f"drive reads and host->device copies (h2d) {busy['h2d']:.1f} s, CPU Adam {busy['cpu_adam']:.2f} s")
print(f"peak RSS {rss_kb / 2**20:.2f} GiB; plan: device {row['device_bytes'] / 2**30:.2f} GiB + host "
      f"{row['host_bytes'] / 2**30:.2f} GiB, NVMe {row['nvme_bytes'] / 1e9:.2f} GB")
print(f"NVMe read per step {n2h / 1e9:.3f} GB; the plan's {row['bytes_per_step']['n2h'] / 1e9:.3f} GB, its least "
      f"{row['bytes_per_step']['min_n2h'] / 1e9:.3f} GB (x{n2h / row['bytes_per_step']['min_n2h']:.5f})")
print(f"drive: fio read {fio / 1e9:.2f} GB/s; drive_bound_s {bound:.1f}, drive_ratio {bound / wall:.3f}")
print(json.dumps({"bench": "lora_13b", "step_s": wall, "busy_s": busy, "peak_rss_bytes": rss_kb * 1024,
                  "n2h_bytes": n2h, "h2d_bytes": h2d, "plan_n2h_bytes": row["bytes_per_step"]["n2h"],
                  "min_n2h_bytes": row["bytes_per_step"]["min_n2h"], "fio_read_bps": fio, "drive_bound_s": bound,
                  "drive_ratio": bound / wall, "plan_device_bytes": row["device_bytes"],
                  "plan_host_bytes": row["host_bytes"]}))
