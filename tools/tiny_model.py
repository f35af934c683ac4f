"""Build a tiny random Llama model and a locally trained byte-level BPE tokenizer, for running a
real vLLM (CPU build) without downloading anything.

Run it with the Python of the vLLM environment (it needs torch, tokenizers and transformers, not
schedlab's packages), from anywhere:

    /path/to/vllm-env/bin/python tools/tiny_model.py OUT_DIR

Shape (checked on the CPU build): hidden 256, 4 attention heads of dim 64 (head dim 16 crashes
the CPU attention kernel), 2 layers, 4,096 positions. The tokenizer is trained on the synthetic
stand-in text, so prompts from the default workload tokenize sensibly.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Iterator
from pathlib import Path

VOCAB_SIZE = 2048
MAX_POSITIONS = 4096
#: The bundled synthetic stand-ins the tokenizer is trained on, in this order (chat, then code):
#: the files of ``runners.workload.conversations.SYNTHETIC_FILES``, named here so the tool runs
#: in a Python that cannot import schedlab.
CORPUS = [
    Path(__file__).resolve().parents[1] / "datasets" / name
    for name in ("sharegpt_synthetic.jsonl.gz", "python_code_synthetic.jsonl.gz")
]


def _corpus(limit: int = 2000) -> Iterator[str]:
    """The turns of the first ``limit`` conversations of each corpus file."""
    for path in CORPUS:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle):
                if number >= limit:
                    break
                for turn in json.loads(line)["conversations"]:
                    yield turn["value"]


def build_tiny_model(out: str | Path, seed: int = 0) -> Path:
    """Write config, random weights (bf16 safetensors) and tokenizer to ``out``; returns it."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(_corpus(), vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=["<s>", "</s>", "<unk>"])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        model_max_length=MAX_POSITIONS,
    )
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(build_tiny_model(args.out, args.seed))
