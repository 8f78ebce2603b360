#!/usr/bin/env bash
# Writes tests/fixtures/spm-tiny/tokenizer.model: a 256-piece BPE sentencepiece model of
# data/default.txt (BOS 1, EOS 2, UNK 0, no PAD; identity normalisation keeps it ~3 KB),
# with Debian's spm_train (package sentencepiece). CI only reads the committed file.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p tests/fixtures/spm-tiny
spm_train --input=data/default.txt --model_prefix=tests/fixtures/spm-tiny/tokenizer --vocab_size=256 \
  --model_type=bpe --character_coverage=1.0 --bos_id=1 --eos_id=2 --unk_id=0 --pad_id=-1 \
  --normalization_rule_name=identity --num_threads=1 >/dev/null 2>&1
rm -f tests/fixtures/spm-tiny/tokenizer.vocab
# The ids test_finetune_data expects:
echo "Hello world, the king" | spm_encode --model=tests/fixtures/spm-tiny/tokenizer.model --output_format=id
