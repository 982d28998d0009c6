"""Architectures beyond the model zoo, at tiny sizes, for the CPU sweep of test_architectures.py:
transformers models the zoo does not hold (decoders with ALiBi, MQA, partial rotary, QK norms,
mixtures of experts; encoders with relative or convolutional attention; encoder-decoders with
local attention or expert layers; vision models with relative position biases, pooling mixers,
window and hierarchical attention; speech models with convolutional front ends).

Each entry names a transformers model class and config class, the config's keyword arguments
at a tiny size (hidden about 64, 1-2 layers, vocabulary 256) and the kind of inputs it takes
(test_architectures.inputs). Random weights; nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("decoder", "encoder", "encdec", "vision", "audio", "speech")


@dataclass(frozen=True)
class Arch:
    """`transformers.<model>(transformers.<config>(**kwargs))`, fed inputs of `kind`; `fp64`:
    whether the model runs in float64 (the test's reference), else eager fp32 is the oracle."""

    model: str
    config: str
    kwargs: dict[str, Any]
    kind: str
    fp64: bool = True

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.model}: kind {self.kind!r} is not one of {KINDS}")


_T: dict[str, Any] = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, max_position_embeddings=64)
_D: dict[str, Any] = dict(_T, use_cache=False)
_ED: dict[str, Any] = dict(
    vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
    decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64,
    use_cache=False, pad_token_id=1, decoder_start_token_id=2, eos_token_id=2, bos_token_id=0)
_T5: dict[str, Any] = dict(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, use_cache=False,
                           decoder_start_token_id=0)
_V: dict[str, Any] = dict(image_size=32, num_channels=3, num_labels=10)
_STAGES: dict[str, Any] = dict(hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1])

ARCHITECTURES: dict[str, Arch] = {
    # decoders
    "bloom": Arch("BloomForCausalLM", "BloomConfig",
                  dict(vocab_size=256, hidden_size=64, n_layer=2, n_head=4, use_cache=False), "decoder"),
    "mpt": Arch("MptForCausalLM", "MptConfig",
                dict(vocab_size=256, d_model=64, n_heads=4, n_layers=2, max_seq_len=64, use_cache=False), "decoder"),
    "gptj": Arch("GPTJForCausalLM", "GPTJConfig", dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
                                                       n_positions=64, use_cache=False), "decoder"),
    "codegen": Arch("CodeGenForCausalLM", "CodeGenConfig", dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4,
                                                                rotary_dim=8, n_positions=64, n_ctx=64, use_cache=False),
                    "decoder"),
    "gpt_bigcode": Arch("GPTBigCodeForCausalLM", "GPTBigCodeConfig",
                        dict(vocab_size=256, n_embd=64, n_layer=2, n_head=4, n_positions=64, use_cache=False), "decoder"),
    "gpt_neo": Arch("GPTNeoForCausalLM", "GPTNeoConfig",
                    dict(vocab_size=256, hidden_size=64, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
                         window_size=8, max_position_embeddings=64, use_cache=False), "decoder"),
    "stablelm": Arch("StableLmForCausalLM", "StableLmConfig", dict(_D, num_key_value_heads=4), "decoder"),
    "phi3": Arch("Phi3ForCausalLM", "Phi3Config", dict(_D, pad_token_id=0), "decoder"),
    "qwen3": Arch("Qwen3ForCausalLM", "Qwen3Config", dict(_D, head_dim=16, num_key_value_heads=2), "decoder"),
    "olmo": Arch("OlmoForCausalLM", "OlmoConfig", dict(_D, pad_token_id=0), "decoder"),
    "olmo2": Arch("Olmo2ForCausalLM", "Olmo2Config", dict(_D, pad_token_id=0), "decoder"),
    "cohere": Arch("CohereForCausalLM", "CohereConfig", dict(_D, pad_token_id=0), "decoder"),
    "starcoder2": Arch("Starcoder2ForCausalLM", "Starcoder2Config", dict(_D, num_key_value_heads=2), "decoder"),
    "granite": Arch("GraniteForCausalLM", "GraniteConfig", _D, "decoder"),
    "gemma": Arch("GemmaForCausalLM", "GemmaConfig", dict(_D, head_dim=16, num_key_value_heads=1), "decoder"),
    "gemma3": Arch("Gemma3ForCausalLM", "Gemma3TextConfig", dict(_D, head_dim=16, num_key_value_heads=2, sliding_window=8),
                   "decoder"),
    "xglm": Arch("XGLMForCausalLM", "XGLMConfig", dict(vocab_size=256, d_model=64, num_layers=2, attention_heads=4,
                                                       ffn_dim=128, max_position_embeddings=64, use_cache=False), "decoder",
                 fp64=False),  # its attention fills a float32 tensor with float64's minimum
    "qwen2_moe": Arch("Qwen2MoeForCausalLM", "Qwen2MoeConfig",
                      dict(_D, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                           shared_expert_intermediate_size=64, num_key_value_heads=4), "decoder"),
    "olmoe": Arch("OlmoeForCausalLM", "OlmoeConfig", dict(_D, num_experts=4, num_experts_per_tok=2, pad_token_id=0),
                  "decoder"),
    "nemotron": Arch("NemotronForCausalLM", "NemotronConfig",
                     dict(_D, head_dim=16, num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2),
                     "decoder"),
    "persimmon": Arch("PersimmonForCausalLM", "PersimmonConfig", _D, "decoder"),
    "glm": Arch("GlmForCausalLM", "GlmConfig", dict(_D, head_dim=16, num_key_value_heads=2, pad_token_id=0), "decoder"),
    "opt_projected": Arch("OPTForCausalLM", "OPTConfig",
                          dict(vocab_size=256, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=4,
                               max_position_embeddings=64, word_embed_proj_dim=32, do_layer_norm_before=False,
                               use_cache=False), "decoder"),
    # encoders
    "xlm_roberta": Arch("XLMRobertaForMaskedLM", "XLMRobertaConfig", _T, "encoder"),
    "mpnet": Arch("MPNetForMaskedLM", "MPNetConfig", _T, "encoder"),
    "convbert": Arch("ConvBertForMaskedLM", "ConvBertConfig", dict(_T, embedding_size=64), "encoder"),
    "squeezebert": Arch("SqueezeBertForMaskedLM", "SqueezeBertConfig", dict(_T, embedding_size=64), "encoder"),
    "longformer": Arch("LongformerForMaskedLM", "LongformerConfig",
                       dict(_T, attention_window=8, max_position_embeddings=80), "encoder"),
    "big_bird": Arch("BigBirdForMaskedLM", "BigBirdConfig", dict(_T, attention_type="original_full"), "encoder"),
    "deberta": Arch("DebertaForMaskedLM", "DebertaConfig", _T, "encoder"),
    "roformer": Arch("RoFormerForMaskedLM", "RoFormerConfig", _T, "encoder"),
    "ernie": Arch("ErnieForMaskedLM", "ErnieConfig", _T, "encoder"),
    "mobilebert": Arch("MobileBertForMaskedLM", "MobileBertConfig",
                       dict(_T, embedding_size=32, intra_bottleneck_size=32, true_hidden_size=32,
                            num_feedforward_networks=2), "encoder"),
    "modernbert": Arch("ModernBertForMaskedLM", "ModernBertConfig",
                       dict(_T, pad_token_id=0, local_attention=8, global_attn_every_n_layers=2), "encoder"),
    "funnel": Arch("FunnelForMaskedLM", "FunnelConfig",
                   dict(vocab_size=256, block_sizes=[1, 1], d_model=64, n_head=4, d_head=16, d_inner=128), "encoder"),
    "xlnet": Arch("XLNetLMHeadModel", "XLNetConfig",
                  dict(vocab_size=256, d_model=64, n_layer=2, n_head=4, d_inner=128, use_mems_train=False), "encoder"),
    "megatron_bert": Arch("MegatronBertForMaskedLM", "MegatronBertConfig", _T, "encoder"),
    "rembert": Arch("RemBertForMaskedLM", "RemBertConfig", dict(_T, input_embedding_size=32, output_embedding_size=32),
                    "encoder"),
    # encoder-decoders
    "pegasus": Arch("PegasusForConditionalGeneration", "PegasusConfig", _ED, "encdec"),
    "marian": Arch("MarianMTModel", "MarianConfig", _ED, "encdec"),
    "mbart": Arch("MBartForConditionalGeneration", "MBartConfig", _ED, "encdec"),
    "blenderbot": Arch("BlenderbotForConditionalGeneration", "BlenderbotConfig", _ED, "encdec"),
    "m2m100": Arch("M2M100ForConditionalGeneration", "M2M100Config", _ED, "encdec"),
    "led": Arch("LEDForConditionalGeneration", "LEDConfig",
                dict(_ED, attention_window=8, max_encoder_position_embeddings=64, max_decoder_position_embeddings=64),
                "encdec"),
    "plbart": Arch("PLBartForConditionalGeneration", "PLBartConfig", _ED, "encdec"),
    "longt5": Arch("LongT5ForConditionalGeneration", "LongT5Config", dict(_T5, local_radius=4), "encdec"),
    "switch_transformers": Arch("SwitchTransformersForConditionalGeneration", "SwitchTransformersConfig",
                                dict(_T5, num_decoder_layers=2, num_experts=4, num_sparse_encoder_layers=1,
                                     num_sparse_decoder_layers=1), "encdec"),
    "umt5": Arch("UMT5ForConditionalGeneration", "UMT5Config", _T5, "encdec"),
    # vision
    "beit": Arch("BeitForImageClassification", "BeitConfig",
                 dict(_V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                      patch_size=8, use_relative_position_bias=True), "vision"),
    "dinov2": Arch("Dinov2ForImageClassification", "Dinov2Config",
                   dict(_V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, patch_size=8), "vision"),
    "convnextv2": Arch("ConvNextV2ForImageClassification", "ConvNextV2Config",
                       dict(_V, hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]), "vision"),
    "swinv2": Arch("Swinv2ForImageClassification", "Swinv2Config",
                   dict(_V, image_size=64, embed_dim=16, depths=[1, 1], num_heads=[2, 4], window_size=4, patch_size=4),
                   "vision"),
    "mobilevit": Arch("MobileViTForImageClassification", "MobileViTConfig",
                      dict(_V, image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32]),
                      "vision"),
    "segformer": Arch("SegformerForImageClassification", "SegformerConfig",
                      dict(_V, **_STAGES, num_attention_heads=[1, 2, 2, 4], decoder_hidden_size=64), "vision"),
    "poolformer": Arch("PoolFormerForImageClassification", "PoolFormerConfig", dict(_V, **_STAGES), "vision"),
    "levit": Arch("LevitForImageClassification", "LevitConfig",
                  dict(_V, image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
                       key_dim=[8, 8, 8]), "vision"),
    "focalnet": Arch("FocalNetForImageClassification", "FocalNetConfig",
                     dict(_V, image_size=64, embed_dim=16, depths=[1, 1], focal_levels=[2, 2], focal_windows=[3, 3]),
                     "vision"),
    "pvt_v2": Arch("PvtV2ForImageClassification", "PvtV2Config",
                   dict(_V, image_size=64, **_STAGES, num_attention_heads=[1, 2, 2, 4]), "vision"),
    "hiera": Arch("HieraForImageClassification", "HieraConfig",
                  dict(_V, image_size=[64, 64], embed_dim=16, depths=[1, 1, 1, 1], num_heads=[1, 2, 2, 4],
                       query_stride=[2, 2], patch_stride=[4, 4], masked_unit_size=[8, 8]), "vision"),
    "bit": Arch("BitForImageClassification", "BitConfig",
                dict(_V, hidden_sizes=[32, 64, 96, 128], depths=[1, 1, 1, 1], embedding_size=32, num_groups=8), "vision"),
    "clip_vision": Arch("CLIPVisionModel", "CLIPVisionConfig",
                        dict(image_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=128, patch_size=8), "vision"),
    "siglip_vision": Arch("SiglipVisionModel", "SiglipVisionConfig",
                          dict(image_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=128, patch_size=8), "vision"),
    # speech
    "wav2vec2": Arch("Wav2Vec2ForCTC", "Wav2Vec2Config",
                     dict(_T, conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                          num_conv_pos_embedding_groups=4), "audio"),
    "whisper": Arch("WhisperForConditionalGeneration", "WhisperConfig",
                    dict(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                         decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                         max_source_positions=16, max_target_positions=32, use_cache=False, decoder_start_token_id=1,
                         pad_token_id=0), "speech"),
}
