"""The zoo's language models: decoder LLMs, encoders and encoder-decoders, all transformers
models built from their configs.

Real sizes keep the family's width, heads and FFN ratio where they are at most about 2048 wide
(else the width is scaled to 2048 at the family's head dim), cap the layers at 8, and cap a
vocabulary over 64k at 32000: one model then fits a few GB at batch 8 x 1024. Decoders run
without a KV cache (`use_cache=False`: the bench measures the forward pass, not generation).
Tiny sizes are hidden 64, 2 layers, 4 heads (GQA and MQA ratios kept), vocabulary 256.
"""

from __future__ import annotations

from typing import Any

from coil.bench.zoo.spec import HF, Entry

VOCAB_CAP = 32000

# the tiny transformer every language entry shrinks to, in each config's own words
_TINY_DECODER: dict[str, Any] = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, max_position_embeddings=64, use_cache=False,
)  # fmt: skip
_TINY_ENCODER: dict[str, Any] = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, max_position_embeddings=64,
)  # fmt: skip


def _decoders() -> list[Entry]:
    return [
        Entry("gpt2", "GPT-2", "decoder",
              "GPT-2 small (124M): 12 layers, hidden 768, 12 heads, learned positions, vocab 50257; "
              "nothing capped",
              HF("GPT2LMHeadModel", "GPT2Config", dict(use_cache=False)),
              HF("GPT2LMHeadModel", "GPT2Config", dict(
                  vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=0,
                  eos_token_id=0, use_cache=False))),
        Entry("llama", "Llama", "decoder",
              "Llama-3.2-1B shapes: hidden 2048, 32 heads / 8 KV heads (GQA), SwiGLU 8192, RoPE, "
              "RMSNorm, tied embeddings; layers 16 -> 8, vocab 128256 -> 32000",
              HF("LlamaForCausalLM", "LlamaConfig", dict(
                  vocab_size=VOCAB_CAP, hidden_size=2048, intermediate_size=8192, num_hidden_layers=8,
                  num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                  tie_word_embeddings=True, use_cache=False)),
              HF("LlamaForCausalLM", "LlamaConfig", dict(
                  _TINY_DECODER, num_key_value_heads=2, tie_word_embeddings=True))),
        Entry("mistral", "Mistral", "decoder",
              "Mistral-7B shapes at hidden 2048: head dim 128 (16 heads / 4 KV heads, GQA 4:1), "
              "SwiGLU 7168, vocab 32000; hidden 4096 -> 2048, layers 32 -> 8, sliding window "
              "4096 -> 512 (so that it acts at 1024 tokens)",
              HF("MistralForCausalLM", "MistralConfig", dict(
                  vocab_size=32000, hidden_size=2048, intermediate_size=7168, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
                  sliding_window=512, use_cache=False)),
              HF("MistralForCausalLM", "MistralConfig", dict(
                  _TINY_DECODER, num_key_value_heads=2, sliding_window=8))),
        Entry("qwen2", "Qwen2", "decoder",
              "Qwen2-1.5B shapes: hidden 1536, 12 heads / 2 KV heads (GQA 6:1), q/k/v bias, "
              "SwiGLU 8960, tied embeddings; layers 28 -> 8, vocab 151936 -> 32000",
              HF("Qwen2ForCausalLM", "Qwen2Config", dict(
                  vocab_size=VOCAB_CAP, hidden_size=1536, intermediate_size=8960, num_hidden_layers=8,
                  num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=4096,
                  tie_word_embeddings=True, use_cache=False)),
              HF("Qwen2ForCausalLM", "Qwen2Config", dict(
                  _TINY_DECODER, num_key_value_heads=1, tie_word_embeddings=True))),
        Entry("phi", "Phi", "decoder",
              "Phi-1.5 shapes: hidden 2048, 32 heads, partial rotary (half the head dim), "
              "attention and MLP in parallel off one LayerNorm, dense biases, GELU 8192, "
              "vocab 51200; layers 24 -> 8",
              HF("PhiForCausalLM", "PhiConfig", dict(
                  vocab_size=51200, hidden_size=2048, intermediate_size=8192, num_hidden_layers=8,
                  num_attention_heads=32, max_position_embeddings=2048, use_cache=False)),
              HF("PhiForCausalLM", "PhiConfig", dict(_TINY_DECODER))),
        Entry("gemma2", "Gemma2", "decoder",
              "Gemma-2-2B shapes: hidden 2304, 8 heads / 4 KV heads of dim 256, GeGLU 9216, "
              "local (sliding window) and global layers alternating, attention and final logit "
              "soft-capping, pre and post norms; layers 26 -> 8, vocab 256000 -> 32000, "
              "sliding window 4096 -> 512",
              HF("Gemma2ForCausalLM", "Gemma2Config", dict(
                  vocab_size=VOCAB_CAP, hidden_size=2304, intermediate_size=9216, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                  max_position_embeddings=8192, sliding_window=512, use_cache=False)),
              HF("Gemma2ForCausalLM", "Gemma2Config", dict(
                  _TINY_DECODER, num_key_value_heads=2, head_dim=16, sliding_window=8))),
        Entry("opt", "OPT", "decoder",
              "OPT-1.3B shapes: hidden 2048, 32 heads, ReLU FFN 8192, learned positions, "
              "vocab 50272; layers 24 -> 8",
              HF("OPTForCausalLM", "OPTConfig", dict(
                  vocab_size=50272, hidden_size=2048, ffn_dim=8192, num_hidden_layers=8,
                  num_attention_heads=32, word_embed_proj_dim=2048, max_position_embeddings=2048,
                  use_cache=False)),
              HF("OPTForCausalLM", "OPTConfig", dict(
                  vocab_size=256, hidden_size=64, ffn_dim=128, num_hidden_layers=2,
                  num_attention_heads=4, word_embed_proj_dim=64, max_position_embeddings=64,
                  use_cache=False))),
        Entry("gpt_neox", "GPT-NeoX", "decoder",
              "Pythia-1.4B shapes: hidden 2048, 16 heads, rotary on a quarter of the head dim, "
              "parallel residual, GELU 8192, untied embeddings, vocab 50304; layers 24 -> 8",
              HF("GPTNeoXForCausalLM", "GPTNeoXConfig", dict(
                  vocab_size=50304, hidden_size=2048, intermediate_size=8192, num_hidden_layers=8,
                  num_attention_heads=16, max_position_embeddings=2048, use_cache=False)),
              HF("GPTNeoXForCausalLM", "GPTNeoXConfig", dict(_TINY_DECODER))),
        Entry("falcon", "Falcon", "decoder",
              "Falcon-7B's architecture at hidden 2048: multi-query attention (one KV head), "
              "attention and MLP in parallel, rotary, GELU 4x; hidden 4544 -> 2048 (32 heads of "
              "64), layers 32 -> 8, vocab 65024 -> 32000",
              HF("FalconForCausalLM", "FalconConfig", dict(
                  vocab_size=VOCAB_CAP, hidden_size=2048, num_hidden_layers=8, num_attention_heads=32,
                  multi_query=True, parallel_attn=True, new_decoder_architecture=False,
                  max_position_embeddings=2048, use_cache=False)),
              HF("FalconForCausalLM", "FalconConfig", dict(
                  vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  multi_query=True, parallel_attn=True, new_decoder_architecture=False,
                  max_position_embeddings=64, bos_token_id=0, eos_token_id=0, use_cache=False))),
        Entry("mixtral", "Mixtral", "decoder",
              "Mixtral-8x7B's architecture at hidden 1024: 8 experts with top-2 routing, expert "
              "SwiGLU 3584, 8 heads / 2 KV heads of dim 128 (GQA 4:1), RoPE, RMSNorm, vocab 32000; "
              "hidden 4096 -> 1024, expert FFN 14336 -> 3584, layers 32 -> 8",
              HF("MixtralForCausalLM", "MixtralConfig", dict(
                  vocab_size=32000, hidden_size=1024, intermediate_size=3584, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=2, num_local_experts=8,
                  num_experts_per_tok=2, max_position_embeddings=4096, use_cache=False)),
              HF("MixtralForCausalLM", "MixtralConfig", dict(
                  _TINY_DECODER, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2))),
        Entry("mamba", "Mamba", "decoder",
              "Mamba-370M shapes: hidden 1024, a selective state-space mixer per layer (state 16, "
              "expand 2, causal conv 4) and no attention, RMSNorm, tied embeddings, vocab 50280; "
              "layers 48 -> 8; transformers' PyTorch path, as without the mamba_ssm kernels: "
              "under torch.compile its scan is torch's associative_scan, or a loop over the "
              "positions where Dynamo reports export (torch 2.11)",
              HF("MambaForCausalLM", "MambaConfig", dict(
                  vocab_size=50280, hidden_size=1024, state_size=16, expand=2, conv_kernel=4,
                  num_hidden_layers=8, use_cache=False)),
              HF("MambaForCausalLM", "MambaConfig", dict(
                  vocab_size=256, hidden_size=64, state_size=8, num_hidden_layers=2, use_cache=False))),
    ]  # fmt: skip


def _encoders() -> list[Entry]:
    base: dict[str, Any] = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                intermediate_size=3072)
    return [
        Entry("bert", "BERT", "encoder",
              "BERT-base: 12 layers, hidden 768, 12 heads, GELU 3072, vocab 30522, masked-LM head; "
              "nothing capped",
              HF("BertForMaskedLM", "BertConfig", dict(base)),
              HF("BertForMaskedLM", "BertConfig", dict(_TINY_ENCODER))),
        Entry("distilbert", "DistilBERT", "encoder",
              "DistilBERT-base: 6 layers, hidden 768, 12 heads, GELU 3072, no token types; "
              "nothing capped",
              HF("DistilBertForMaskedLM", "DistilBertConfig", {}),
              HF("DistilBertForMaskedLM", "DistilBertConfig", dict(
                  vocab_size=256, dim=64, hidden_dim=128, n_layers=2, n_heads=4,
                  max_position_embeddings=64))),
        Entry("roberta", "RoBERTa", "encoder",
              "RoBERTa-base: BERT-base's encoder, positions offset past the padding index, "
              "vocab 50265; nothing capped",
              HF("RobertaForMaskedLM", "RobertaConfig", dict(
                  base, vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                  pad_token_id=1, bos_token_id=0, eos_token_id=2)),
              HF("RobertaForMaskedLM", "RobertaConfig", dict(
                  _TINY_ENCODER, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1,
                  bos_token_id=0, eos_token_id=2))),
        Entry("albert", "ALBERT", "encoder",
              "ALBERT-base-v2: factorised embeddings (128 -> 768), one layer's weights shared by "
              "all 12, 12 heads, vocab 30000; nothing capped",
              HF("AlbertForMaskedLM", "AlbertConfig", dict(base, embedding_size=128, vocab_size=30000)),
              HF("AlbertForMaskedLM", "AlbertConfig", dict(_TINY_ENCODER, embedding_size=16))),
        Entry("electra", "ELECTRA", "encoder",
              "ELECTRA-base: BERT-base's encoder with ELECTRA's masked-LM (generator) head, "
              "vocab 30522; nothing capped",
              HF("ElectraForMaskedLM", "ElectraConfig", dict(base, embedding_size=768)),
              HF("ElectraForMaskedLM", "ElectraConfig", dict(_TINY_ENCODER, embedding_size=32))),
        Entry("deberta_v2", "DeBERTa-v2", "encoder",
              "DeBERTa-v3-base shapes: 12 layers, hidden 768, 12 heads, disentangled relative "
              "attention (c2p and p2c, 256 log buckets, shared keys), no absolute positions; "
              "vocab 128100 -> 32000",
              HF("DebertaV2ForMaskedLM", "DebertaV2Config", dict(
                  base, vocab_size=VOCAB_CAP, max_position_embeddings=512, type_vocab_size=0,
                  relative_attention=True, position_buckets=256, max_relative_positions=-1,
                  pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm", share_att_key=True,
                  position_biased_input=False)),
              HF("DebertaV2ForMaskedLM", "DebertaV2Config", dict(
                  _TINY_ENCODER, type_vocab_size=0, relative_attention=True, position_buckets=8,
                  max_relative_positions=-1, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                  share_att_key=True, position_biased_input=False))),
    ]  # fmt: skip


def _encoder_decoders() -> list[Entry]:
    return [
        Entry("t5", "T5", "encdec",
              "T5-base: 12 + 12 layers, d_model 768, 12 heads, ReLU FFN 3072, relative position "
              "buckets, RMS norms, vocab 32128; nothing capped",
              HF("T5ForConditionalGeneration", "T5Config", dict(
                  vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12,
                  num_decoder_layers=12, num_heads=12, use_cache=False)),
              HF("T5ForConditionalGeneration", "T5Config", dict(
                  vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                  num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
                  use_cache=False))),
        Entry("bart", "BART", "encdec",
              "BART-base: 6 + 6 layers, d_model 768, 12 heads, GELU 3072, learned positions, "
              "vocab 50265; nothing capped",
              HF("BartForConditionalGeneration", "BartConfig", dict(
                  vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6,
                  encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
                  decoder_ffn_dim=3072, max_position_embeddings=1024, use_cache=False)),
              HF("BartForConditionalGeneration", "BartConfig", dict(
                  vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2,
                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                  decoder_ffn_dim=128, max_position_embeddings=64, use_cache=False))),
    ]  # fmt: skip


ENTRIES: list[Entry] = [*_decoders(), *_encoders(), *_encoder_decoders()]
