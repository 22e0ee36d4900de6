"""Build a tiny random Llama (2 layers, hidden 128, 2 heads, vocab 1024, bf16)
with a byte-level BPE tokenizer, fully offline. Usage: python build_model.py OUT_DIR"""
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
torch.manual_seed(0)

words = ("the of and to in is was for on that with as by at from it an be this "
         "gpu rank tensor kernel memory error worker engine request token prefill "
         "decode cache batch chunk server model layer head weight shard").split()
text = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(40)) for i in range(2000)]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=1024, special_tokens=["<s>", "</s>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
hf_tok.save_pretrained(out)

cfg = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=256,
                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                  max_position_embeddings=4096, bos_token_id=0, eos_token_id=1,
                  torch_dtype="bfloat16")
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
print("wrote", out)
