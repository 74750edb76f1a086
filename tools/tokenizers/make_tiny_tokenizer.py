"""Writes tests/data/tiny-text/tokenizer.json: a 512-token byte-level BPE for the tiny-ced fixture
(random weights), so the text path (chat format, tokenizer, server) can run end to end on it.
Ids follow tiny-ced's config: bos 0, eos 1, pad 2, <｜System｜> 500 (= dspark_noise_token_id), image 511.
Deterministic: trained on this repository's SPEC-independent test strings below."""
import json
import os
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "tiny-text", "tokenizer.json")
SPECIAL_LOW = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"]
SPECIAL_HIGH = ["<｜System｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜"]
RESERVED = [f"<｜reserved_{i}｜>" for i in range(5)]
IMAGE = "<｜deepseek_image｜>"

corpus = []
stdlib = os.path.join(os.path.dirname(os.__file__))
for name in sorted(os.listdir(stdlib))[:60]:
    path = os.path.join(stdlib, name)
    if name.endswith(".py") and os.path.isfile(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            corpus.append(f.read())

tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIAL_LOW,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(corpus, trainer)
assert tok.get_vocab_size() == 500, tok.get_vocab_size()
tok.add_special_tokens(SPECIAL_HIGH + RESERVED + [IMAGE])
assert tok.token_to_id("<｜System｜>") == 500 and tok.token_to_id(IMAGE) == 511
os.makedirs(os.path.dirname(OUT), exist_ok=True)
tok.save(OUT)
print("wrote", os.path.relpath(OUT), tok.get_vocab_size(), "tokens")
