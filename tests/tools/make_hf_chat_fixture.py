"""Writes tests/fixtures/hf-chat-tiny/: a tiny Hugging Face tokenizer (byte-level BPE over
its corpus's characters, at most 250 ids, Llama-3-style special tokens and chat template) and
data/chat-tiny.jsonl, chat records
in OpenAI's `messages` format. Run once with the `tokenizers` package (the project venv,
tools/setup.sh): .venv/bin/python tests/tools/make_hf_chat_fixture.py. Nothing at build or
test time downloads anything; the outputs are committed."""
import json
import os
import random

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

root = os.path.join(os.path.dirname(__file__), "..", "..")
out = os.path.join(root, "tests", "fixtures", "hf-chat-tiny")
os.makedirs(out, exist_ok=True)

specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
words = ("the king queen reverse word answer question system user assistant you are a helpful model "
         "apple river stone cloud music garden window letter number seven three").split()
rng = random.Random(7)
corpus = [" ".join(rng.choice(words) for _ in range(12)) for _ in range(400)]

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
# The corpus's own characters plus merges, within the 256 ids of configs/llama-tiny-bytes.json.
trainer = trainers.BpeTrainer(vocab_size=250, special_tokens=specials, show_progress=False)
tok.train_from_iterator(corpus, trainer)
tok.save(os.path.join(out, "tokenizer.json"))

# Llama 3's template, shortened: a header per turn, <|eot_id|> closing each.
template = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
            "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
            "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
               "eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>", "model_max_length": 256,
               "clean_up_tokenization_spaces": False, "chat_template": template}, f, indent=2)
with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
    json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>"}, f,
              indent=2)

# Chat data: answer with the question's words reversed (a task a tiny model learns).
with open(os.path.join(root, "data", "chat-tiny.jsonl"), "w") as f:
    for i in range(200):
        q = [rng.choice(words) for _ in range(3)]
        msgs = [{"role": "user", "content": "reverse " + " ".join(q)},
                {"role": "assistant", "content": " ".join(reversed(q))}]
        if i % 2:
            msgs = [{"role": "system", "content": "you are a helpful model"}] + msgs + [
                {"role": "user", "content": "answer " + q[0]}, {"role": "assistant", "content": q[0]}]
        f.write(json.dumps({"messages": msgs}) + "\n")
print("wrote", out, "and data/chat-tiny.jsonl")
