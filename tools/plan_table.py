#!/usr/bin/env python3
"""Prints docs/13b-class-plans.md's tables: `strata plan` for the 12-14B models of
configs/hf/ on 1, 2, 4 and 8 GPUs of 80 GB with 512 GB of host RAM and NVMe per node, and on a
machine with 24 GiB of RAM and no GPU, each row the plan `strata plan` recommends.

  python3 tools/plan_table.py [build/strata]

With --lora, the same for LoRA of rank 16 on every linear layer (--lora-rank 16 --lora-targets
all-linear), Llama-2-13B's shape included, and this machine's row with the budgets the 13B
LoRA run used (8 GiB for the ops, 12 GiB for the host tier):

  python3 tools/plan_table.py build/strata --lora
"""
import json
import subprocess
import sys

LORA = "--lora" in sys.argv[1:]
ARGS = [a for a in sys.argv[1:] if a != "--lora"]
STRATA = ARGS[0] if ARGS else "build/strata"
MODELS = [("Llama-2-13B", "configs/hf/llama-2-13b.json")] if LORA else []
MODELS += [("Qwen3-14B", "configs/hf/qwen3-14b.json"), ("Phi-4", "configs/hf/phi-4.json"),
          ("Gemma-3-12B", "configs/hf/gemma-3-12b.json"), ("OLMo-2-13B", "configs/hf/olmo-2-13b.json")]
# An 80 GB GPU node: throughputs stated, not measured (pass --bench with measured ones).
GPU = ["--device", "cuda", "--device-mem", "80GB", "--device-tflops", "400", "--link-gbps", "25", "--net-gbps", "100",
       "--host-gbps", "30", "--nvme-gbps", "6", "--micro-batch", "1", "--seq-len", "4096"]
# This machine: the CPU backend, 24 GiB shared by the "device" and host tiers, 60 GB of disk.
CPU = ["--device", "cpu", "--device-mem", "14GiB", "--host-mem", "6GiB", "--nvme-size", "60GB", "--micro-batch", "1",
       "--seq-len", "512"]


ADAPTERS = ["--lora-rank", "16", "--lora-targets", "all-linear"] if LORA else []
CPU_LORA = ["--device", "cpu", "--device-mem", "8GiB", "--host-mem", "12GiB", "--nvme-size", "60GB", "--micro-batch",
            "1", "--seq-len", "512"]


def plan(model, args):
    # (exit status 1 when nothing fits: the JSON line still lists every plan)
    out = subprocess.run([STRATA, "plan", "--model", model, *args, *ADAPTERS, "--json"], capture_output=True,
                         text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j["plan"], j.get("recommended")


def params(model):
    out = subprocess.run([STRATA, "plan", "--model", model, "--micro-batch", "1", "--seq-len", "16"], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split("strata plan: ")[1].split(" parameters")[0])


def options(r):
    opts = f"--zero-stage {r['stage']}"
    if r["offload"] != "none":
        tier = r["offload"].split("+")[0]
        param = "nvme" if r["offload"].endswith("param-nvme") else tier
        opts += f" --offload-optimizer {tier}" + (f" --offload-param {param}" if "+param" in r["offload"] else "")
    if r["checkpointing"]:
        opts += " --activation-checkpointing"
    return opts


def row(name, setting, rows, rec):
    if rec is None or not rows[rec]["fits"]:  # the plan that needs the least RAM, and that it does not fit
        r = min(rows, key=lambda r: (r["device_bytes"] + r["host_bytes"], r["nvme_bytes"]))
        plan_text = f"nothing fits; the least RAM, `{options(r)}`, needs"
    else:
        r = rows[rec]
        plan_text = f"`{options(r)}`"
    return (f"| {name} | {setting} | {plan_text} | {r['device_bytes'] / 1e9:.1f} | {r['host_bytes'] / 1e9:.1f} | "
            f"{r['nvme_bytes'] / 1e9:.1f} | {r['step_s']:.2f} |")


def main():
    print("| model | parameters | config |")
    print("|---|---|---|")
    for name, cfg in MODELS:
        print(f"| {name} | {params(cfg) / 1e9:.2f}B | `{cfg}` |")
    print()
    print("| model | GPUs (80 GB, 512 GB host) | recommended plan | device GB/rank | host GB/rank | NVMe GB/rank "
          "| step s (estimate) |")
    print("|---|---|---|---|---|---|---|")
    for name, cfg in MODELS:
        for ranks in (1, 2, 4, 8):
            host = f"{512 // ranks}GB"  # one node: 512 GB shared by its ranks
            rows, rec = plan(cfg, GPU + ["--ranks", str(ranks), "--host-mem", host])
            print(row(name, str(ranks), rows, rec))
    print()
    print("| model | this machine (24 GiB, no GPU) | recommended plan | device GB | host GB | NVMe GB | step s |")
    print("|---|---|---|---|---|---|---|")
    for name, cfg in MODELS:
        if LORA:
            rows, rec = plan(cfg, CPU_LORA)
            print(row(name, "LoRA r16, f32 states", rows, rec))
            continue
        for label, extra in (("f32 states", []),
                             ("bf16 states", ["--optimizer-state-dtype", "bf16", "--master-dtype", "bf16"])):
            rows, rec = plan(cfg, CPU + extra)
            print(row(name, label, rows, rec))


if __name__ == "__main__":
    main()
