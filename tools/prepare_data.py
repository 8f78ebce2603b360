#!/usr/bin/env python3
"""Fine-tuning data for `strata train`, prepared with the model's own Hugging Face tokenizer
and chat template, as llm.c and nanoGPT prepare theirs: in Python, once, before training.

    .venv/bin/python tools/prepare_data.py --model MODEL_DIR --input IN.jsonl --output OUT.jsonl

Each input line is one of
  {"messages": [{"role": "system"|"user"|"assistant"|..., "content": "..."}, ...]}  (OpenAI chat)
  {"prompt": "...", "completion": "..."}
  {"text": "..."}
and becomes {"input_ids": [...], "loss_mask": [0|1, ...]} (strata's FinetuneData), the loss
counting only what the model should learn to write:
  - messages: the conversation rendered by the tokenizer's chat template, the loss on every
    assistant turn (its content and the template's end-of-turn marker), nothing else;
  - prompt/completion: the prompt as the tokenizer encodes it (BOS when its config adds
    one), the completion and EOS counted;
  - text: all of it (BOS as configured, EOS appended).
The model directory needs tokenizer.json (or a tokenizer transformers can load) and, for
chat records, a chat template (tokenizer_config.json's chat_template, or chat_template.jinja).
Needs `transformers` and `jinja2` (no torch): tools/setup.sh installs them into .venv/.
"""
import argparse
import json
import os
import sys


def fail(msg, hint):
    sys.exit(f"prepare_data: {msg}\n  ({hint})")


def load_tokenizer(model):
    try:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from transformers import AutoTokenizer
    except ImportError:
        fail("the transformers package is missing", "run tools/setup.sh, then use .venv/bin/python")
    try:
        return AutoTokenizer.from_pretrained(model, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - transformers raises many kinds
        fail(f"no Hugging Face tokenizer could be loaded from '{model}': {e}",
             "give the model directory that holds tokenizer.json (or tokenizer.model)")


def chat_spans(tok, messages, where):
    """The rendered conversation and the character ranges of its assistant turns: each turn is
    what the template adds between the conversation up to it (with the generation prompt) and
    the conversation including it."""
    def render(msgs, gen):
        return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
    full = render(messages, False)
    spans = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        before, upto = render(messages[:i], True), render(messages[: i + 1], False)
        if not (upto.startswith(before) and full.startswith(upto)):
            fail(f"{where}: the chat template does not render turn {i} as an extension of the turns before it",
                 "this template cannot be masked by prefix; give prompt/completion records instead")
        spans.append((len(before), len(upto)))
    if not spans:
        fail(f"{where}: no assistant turn: nothing to learn", "drop the record or give it an assistant turn")
    return full, spans


def encode_chat(tok, messages, where):
    full, spans = chat_spans(tok, messages, where)
    # The template writes BOS itself (as it does for the model's own chats): no second one.
    if tok.is_fast:
        enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
        ids = enc["input_ids"]
        mask = [int(any(a < e and b > s for s, e in spans)) for a, b in enc["offset_mapping"]]
    else:  # no offsets: tokenize the pieces between span edges (the same text, cut at turns)
        ids, mask, at = [], [], 0
        for s, e in spans + [(len(full), len(full))]:
            for piece, counted in ((full[at:s], 0), (full[s:e], 1)):
                if piece:
                    p = tok(piece, add_special_tokens=False)["input_ids"]
                    ids += p
                    mask += [counted] * len(p)
            at = e
    return ids, mask


def encode_record(tok, rec, where):
    if not isinstance(rec, dict):
        fail(f"{where}: not a JSON object", "each line must be one JSON object")
    eos = [tok.eos_token_id] if tok.eos_token_id is not None else []
    if "messages" in rec:
        msgs = rec["messages"]
        if not isinstance(msgs, list) or not all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
            fail(f"{where}: \"messages\" must be a list of {{\"role\", \"content\"}} objects", "OpenAI's chat format")
        if tok.chat_template is None:
            fail(f"{where}: chat records, but the tokenizer has no chat template",
                 "use the instruct model's directory, or give prompt/completion records")
        return encode_chat(tok, msgs, where)
    if "prompt" in rec and "completion" in rec:
        p = tok(rec["prompt"])["input_ids"]  # BOS as the tokenizer's config adds it
        c = tok(rec["completion"], add_special_tokens=False)["input_ids"] + eos
        return p + c, [0] * len(p) + [1] * len(c)
    if "text" in rec:
        ids = tok(rec["text"])["input_ids"] + eos
        return ids, [1] * len(ids)
    fail(f"{where}: a record needs \"messages\", \"prompt\" and \"completion\", or \"text\"", "fix the record")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the Hugging Face model directory (its tokenizer and template)")
    ap.add_argument("--input", required=True, help="JSONL: messages, prompt/completion or text records")
    ap.add_argument("--output", required=True, help="JSONL for strata train --data")
    a = ap.parse_args()
    tok = load_tokenizer(a.model)
    n = tokens = counted = 0
    tmp = a.output + ".tmp"
    with open(a.input, encoding="utf-8") as f, open(tmp, "w", encoding="utf-8") as out:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"'{a.input}', line {line_no}"
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                fail(f"{where}: invalid JSON ({e})", "each line must be one JSON object")
            ids, mask = encode_record(tok, rec, where)
            out.write(json.dumps({"input_ids": ids, "loss_mask": mask}, separators=(",", ":")) + "\n")
            n, tokens, counted = n + 1, tokens + len(ids), counted + sum(mask)
    if n == 0:
        os.remove(tmp)
        fail(f"'{a.input}' holds no records", "give a JSONL file with one record per line")
    os.replace(tmp, a.output)  # all or nothing: a failed run leaves no half-written file
    print(f"prepare_data: {n} records, {tokens} tokens ({counted} counted by the loss) -> {a.output}")


if __name__ == "__main__":
    main()
