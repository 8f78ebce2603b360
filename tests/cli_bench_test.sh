#!/usr/bin/env bash
# The benchmarks as users run them, by ctest: cli_bench_test.sh STRATA_BINARY CASE. Smoke runs of
# each `strata bench`, and the runs against the optional peers (tools/setup-peers.sh), which
# are skipped with the reason where those are not installed.
source "$(dirname "$0")/cli_case.sh" "$@"
case $case_name in
  bench_adam_smoke)
    "$bin" bench adam --sizes 1M,3000001 --repeats 1 --peer none >"$tmp/out" 2>"$tmp/err" || fail "bench adam failed: $(cat "$tmp/err")"
    last=$(tail -1 "$tmp/out")
    for k in params_per_s gbytes_per_s bound_gbytes_per_s bound_ratio; do
      grep -q "\"$k\"" <<<"$last" || fail "bench adam JSON lacks $k: $last"
    done
    # 16-bit states and master: the bytes per parameter the bound and the rate count.
    for args in "--state-dtype bf16:20" "--state-dtype bf16 --master-dtype bf16 --rounding nearest:16" \
                "--grad-dtype bf16:26" "--state-dtype bf16 --master-dtype bf16 --grad-dtype bf16 --rounding nearest:14"; do
      "$bin" bench adam --sizes 1M --repeats 1 --peer none ${args%%:*} >"$tmp/out" 2>"$tmp/err" ||
        fail "bench adam ${args%%:*} failed: $(cat "$tmp/err")"
      grep -q "\"bytes_per_param\":${args##*:}.0" <(tail -1 "$tmp/out") || fail "bench adam ${args%%:*}: $(tail -1 "$tmp/out")"
    done
    "$bin" bench adam --state-dtype f16 >"$tmp/out" 2>&1 && fail "bench adam accepted --state-dtype f16"
    grep -q "choose f32 or bf16" "$tmp/out" || fail "bench adam --state-dtype f16: $(cat "$tmp/out")"
    echo "ok: $(head -c 200 <<<"$last")" ;;
  bench_model_smoke)
    # The step against the bound of its own GEMMs, for GPT-2 and Llama, f32 and bf16.
    for m in configs/gpt2-tiny-bytes.json configs/llama-tiny-bytes.json; do
      "$bin" bench model --model "$m" --micro-batch 2 --seq-len 16 --steps 1 --peer none >"$tmp/out" 2>"$tmp/err" ||
        fail "bench model $m failed: $(cat "$tmp/err")"
      last=$(tail -1 "$tmp/out")
      /usr/bin/python3 - "$last" <<'PY' || fail "bench model $m: $last"
import json, sys
j = json.loads(sys.argv[1])
for p in ("f32", "bf16"):
    r = j[p]
    assert r["bound_gflops"] > 0 and r["bound_ratio"] > 0 and r["bound_impl"], r
PY
    done
    # --profile: the best step by op; the ops and what lies outside them add up to the step.
    "$bin" bench model --model configs/llama-tiny-bytes.json --micro-batch 2 --seq-len 16 --steps 2 --peer none \
      --profile >"$tmp/out" 2>"$tmp/err" || fail "bench model --profile failed: $(cat "$tmp/err")"
    grep -q "^matmul_fwd" "$tmp/out" || fail "bench model --profile printed no matmul_fwd row: $(cat "$tmp/out")"
    /usr/bin/python3 - "$(tail -1 "$tmp/out")" <<'PY' || fail "bench model --profile: $(tail -1 "$tmp/out")"
import json, sys
j = json.loads(sys.argv[1])
for p in ("f32", "bf16"):
    rows, step = j[p]["profile"], j[p]["step_s"]
    ops = {r["op"]: r for r in rows}
    assert {"matmul_fwd", "matmul_bwd", "attention_fwd", "attention_bwd", "rmsnorm_fwd", "adamw"} <= set(ops), ops
    assert ops["matmul_fwd"]["gflops"] > 0 and ops["matmul_fwd"]["calls"] == 2 * 4 + 1, ops["matmul_fwd"]
    total = sum(r["seconds"] for r in rows)
    assert abs(total - step) <= 0.02 * step + 1e-4, (total, step)
PY
    "$bin" bench model --device cuda --profile --peer none >"$tmp/out" 2>&1 && fail "bench model --profile on cuda ran"
    echo "ok: $(head -c 300 <<<"$last")" ;;
  bench_model_torch_peer)
    # The PyTorch 2 peer (tools/setup-peers.sh's venv, or a fixture venv in STRATA_TORCH_PYTHON):
    # SDPA, the fused AdamW, bf16 autocast, and the JSON that says which PyTorch ran.
    py=
    IFS=: read -ra candidates <<<"${STRATA_PEERS:-/opt/strata-peers}/venv/bin/python:${STRATA_TORCH_PYTHON:-}"
    for p in "${candidates[@]}"; do
      [[ -n $p ]] && "$p" -c "import torch, sys; sys.exit(int(torch.__version__.split('.')[0]) < 2)" 2>/dev/null && { py=$p; break; }
    done
    [[ -n $py ]] || { echo "skipped: no Python with PyTorch 2 (run tools/setup-peers.sh, or set STRATA_TORCH_PYTHON)"; exit 77; }
    "$bin" bench model --model configs/llama-tiny.json --micro-batch 2 --seq-len 16 --steps 1 --peer torch \
      --python "$py" --peer-mode eager --peer-precision f32,bf16 >"$tmp/out" 2>"$tmp/err" ||
      fail "bench model --peer torch failed: $(cat "$tmp/err" "$tmp/out")"
    /usr/bin/python3 - "$(tail -1 "$tmp/out")" "$py" <<'PY' || fail "bench model --peer torch: $(tail -1 "$tmp/out")"
import json, sys
j, py = json.loads(sys.argv[1]), sys.argv[2]
tp = j["torch_peer"]
assert tp["python"] == py and tp["source"] == "--python" and tp["torch"].startswith("2."), tp
assert j["torch_version"] == tp["torch"], j
assert [r["config"] for r in tp["runs"]] == ["f32+eager", "bf16+eager"], tp["runs"]
for r in tp["runs"]:
    assert r["tokens_per_s"] > 0 and r["sdpa"] is True and r["adamw"] == "fused" and r["compile"] is False, r
    assert r["autocast"] == (r["dtype"] == "bf16"), r
for k in ("cpu_capability", "blas", "onednn"):
    assert tp[k], (k, tp)
best = max(tp["runs"], key=lambda r: r["tokens_per_s"])
assert tp["fastest"] == best["config"], tp
for p in ("f32", "bf16"):
    r = j[p]
    assert r["torch_fastest"] == best["config"], r
    assert abs(r["ratio_vs_torch_fastest"] - r["tokens_per_s"] / best["tokens_per_s"]) < 1e-9 * r["ratio_vs_torch_fastest"], r
    assert r["torch_config"] == p + "+eager", r
PY
    # The peer's GPT-2 pads its vocabulary as nanoGPT does, and --peer-mode is checked.
    "$bin" bench model --model configs/gpt2-tiny.json --micro-batch 2 --seq-len 16 --steps 1 --peer torch \
      --python "$py" --peer-mode eager --peer-precision f32 --precision f32 >"$tmp/out" 2>"$tmp/err" ||
      fail "bench model gpt2 --peer torch failed: $(cat "$tmp/err" "$tmp/out")"
    grep -q '"ratio_vs_torch_fastest"' <(tail -1 "$tmp/out") || fail "gpt2: no ratio_vs_torch_fastest: $(tail -1 "$tmp/out")"
    "$bin" bench model --peer torch --python "$py" --peer-mode jit >"$tmp/out" 2>&1 && fail "--peer-mode jit accepted"
    grep -q "peer-mode jit" "$tmp/out" || fail "--peer-mode jit: $(cat "$tmp/out")"
    "$bin" bench model --peer torch --python /nonexistent/python >"$tmp/out" 2>&1 && fail "a missing --python accepted"
    grep -q "cannot import torch" "$tmp/out" || fail "--python /nonexistent/python: $(cat "$tmp/out")"
    # Without the peers venv, Debian's PyTorch 1.13 where installed: eager, hand-written attention.
    if /usr/bin/python3 -c "import torch, sys; sys.exit(not torch.__version__.startswith('1.'))" 2>/dev/null; then
      STRATA_PEERS=$tmp/none "$bin" bench model --model configs/llama-tiny.json --micro-batch 2 --seq-len 16 --steps 1 \
        --peer torch --peer-precision f32 --precision f32 >"$tmp/out" 2>"$tmp/err" ||
        fail "bench model on Debian's torch failed: $(cat "$tmp/err" "$tmp/out")"
      /usr/bin/python3 - "$(tail -1 "$tmp/out")" <<'PY' || fail "bench model on Debian's torch: $(tail -1 "$tmp/out")"
import json, sys
tp = json.loads(sys.argv[1])["torch_peer"]
assert tp["source"] == "Debian python3-torch" and tp["torch"].startswith("1."), tp
assert [(r["config"], r["sdpa"]) for r in tp["runs"]] == [("f32+eager", False)], tp["runs"]
PY
    fi
    echo "ok: the peer ran on $py" ;;
  bench_adam_deepspeed)
    # DeepSpeed's CPU Adam (tools/setup-peers.sh): f32 Step_8 and its 16-bit-state step.
    ds=${STRATA_DS_ADAM:-${STRATA_PEERS:-/opt/strata-peers}/ds_cpu_adam_bench}
    [[ -x $ds ]] || { echo "skipped: no DeepSpeed CPU Adam harness at $ds (run tools/setup-peers.sh)"; exit 77; }
    "$bin" bench adam --sizes 1M --repeats 2 --peer "$ds" >"$tmp/out" 2>"$tmp/err" || fail "bench adam --peer failed: $(cat "$tmp/err")"
    grep -q '"ratio_vs_deepspeed"' <(tail -1 "$tmp/out") || fail "no ratio_vs_deepspeed: $(tail -1 "$tmp/out")"
    "$bin" bench adam --sizes 1M --repeats 2 --peer "$ds" --state-dtype bf16 --master-dtype bf16 --grad-dtype bf16 \
      --rounding nearest >"$tmp/out" 2>"$tmp/err" || fail "bench adam bf16 --peer failed: $(cat "$tmp/err")"
    /usr/bin/python3 - "$(tail -1 "$tmp/out")" <<'PY' || fail "bench adam bf16 --peer: $(tail -1 "$tmp/out")"
import json, sys
j = json.loads(sys.argv[1])
assert j["bytes_per_param"] == 14 and j["deepspeed"], j
row = j["sizes"][0]
if "ratio_vs_deepspeed_bf16_state" in row:
    assert row["deepspeed_bf16_state_params_per_s"] > 0 and j["deepspeed_bf16_state"].startswith("Step_8"), j
else:  # a DeepSpeed without the step names itself
    assert "has no 16-bit-state" in j["deepspeed_bf16_state"], j
PY
    echo "ok: $(tail -1 "$tmp/out" | head -c 200)" ;;
  bench_offload_smoke)
    "$bin" bench offload --model configs/gpt2-tiny-bytes.json --seq-len 16 --steps 1 --warmup 1 >"$tmp/out" 2>"$tmp/err" ||
      fail "bench offload failed: $(cat "$tmp/err")"
    last=$(tail -1 "$tmp/out")
    for k in overlap step_ratio busy_s cpu_adam d2h_bytes; do grep -q "\"$k\"" <<<"$last" || fail "JSON lacks $k: $last"; done
    # On NVMe, against fio's bandwidth on the same file (when fio is installed).
    mkdir -p "$tmp/nvme"
    "$bin" bench offload --tier nvme --nvme-path "$tmp/nvme" --zero-stage 3 --offload-param nvme --offload-ratio 1 \
      --model configs/gpt2-tiny-bytes.json --seq-len 16 --steps 1 --warmup 1 --fio-bytes 8MiB >"$tmp/out" 2>"$tmp/err" ||
      fail "bench offload --tier nvme failed: $(cat "$tmp/err")"
    last=$(tail -1 "$tmp/out")
    for k in n2h_bytes h2n_bytes cpu_adam_ram_s cpu_adam_ratio; do grep -q "\"$k\"" <<<"$last" || fail "JSON lacks $k: $last"; done
    if command -v fio >/dev/null; then
      for k in drive_bound_s drive_ratio; do grep -q "\"$k\"" <<<"$last" || fail "fio present but no $k: $last"; done
    else
      grep -q "fio not run (not installed" "$tmp/out" || fail "no word on the missing fio: $(tail -3 "$tmp/out")"
    fi
    [[ -z $(ls "$tmp/nvme") ]] || fail "files left behind: $(ls "$tmp/nvme")"
    expect_error 2 "needs --nvme-path" -- bench offload --tier nvme
    echo "ok: $(head -c 200 <<<"$last")" ;;
  bench_nvme_smoke)
    "$bin" bench nvme --nvme-path "$tmp" --bytes 8MiB --request-sizes 1MiB --queue-depths 4 >"$tmp/out" 2>"$tmp/err" ||
      fail "bench nvme failed: $(cat "$tmp/err")"
    last=$(tail -1 "$tmp/out")
    for k in rows write_bps read_bps; do grep -q "\"$k\"" <<<"$last" || fail "JSON lacks $k: $last"; done
    if command -v fio >/dev/null; then grep -q '"read_ratio"' <<<"$last" || fail "fio present but no ratio: $last"; fi
    echo "ok: $(head -c 200 <<<"$last")" ;;
  bench_suite)
    # Real runs (1 and 2 ranks, offload, one the plan skips) and a scaling search, end to end.
    "$bin" bench suite --quick --suite "$src/tests/fixtures/bench/suite-tiny.json" --out "$tmp/res" >"$tmp/out" 2>&1 ||
      fail "bench suite failed: $(tail -5 "$tmp/out")"
    tail -1 "$tmp/out" | grep -q '"ok":16,"skipped":1,"out_of_memory":0,"failed":0' || fail "$(tail -3 "$tmp/out")"
    dir=$(ls -d "$tmp"/res/*/)
    for png in suite.png scaling.png; do
      [[ "$(head -c 4 "$dir/$png" | od -An -c | tr -d ' ')" == "211PNG" ]] || fail "$png is not a PNG"
    done
    grep -q "^| tiny | scaled/gpt-1.5b | " "$dir/results.md" || fail "no table: $(head -20 "$dir/results.md")"
    grep -q "skipped: plan per rank: device" "$dir/results.md" || fail "the 170B run was not skipped by the plan"
    # The plan never promises a model the run cannot train, and misses by at most one layer.
    /usr/bin/python3 - "$dir/results.json" <<'PY' || fail "scaling: measured against plan"
import json, sys
r = json.load(open(sys.argv[1]))
for c in r["scaling"]["cells"]:
    assert c["measured_layers"] >= c["planned_layers"] >= c["measured_layers"] - 1, c
for run in r["runs"]:
    if run["status"] == "ok":
        s = run["result"]
        assert s["tokens_per_s"] > 0 and s["tflops_per_device"] > 0 and s["peak_bytes"]["device"] > 0, run
        assert run["plan"]["device"] >= s["peak_bytes"]["device"], run
        assert (s["comm_bytes_per_step"] > 0) == (run["ranks"] > 1), run
PY
    echo "ok: $(tail -1 "$tmp/out")"
    expect_error 2 "unexpected argument" -- bench suite stray ;;
  *) fail "unknown case $case_name" ;;
esac
