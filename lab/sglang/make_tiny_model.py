"""Write a tiny random-weight Llama model + a locally trained BPE tokenizer to a folder.

No hub access is needed: the tokenizer is trained on a few sentences, the weights are
random. Good enough to start a server and run a forward pass; the text it makes is noise.

    python lab/sglang/make_tiny_model.py /work/venvs/tiny-llama
"""
import sys

from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

out = sys.argv[1]
text = ["the quick brown fox jumps over the lazy dog",
        "a crash log of a multi gpu job shows which rank failed first",
        "hello world, this is a tiny model for tests"] * 50

tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(text, trainers.BpeTrainer(
    vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                               bos_token="<s>", eos_token="</s>")
fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                      "{% endfor %}assistant:")
fast.save_pretrained(out)

cfg = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=128,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
                  torch_dtype="bfloat16")
LlamaForCausalLM(cfg).save_pretrained(out)
print("wrote", out)
