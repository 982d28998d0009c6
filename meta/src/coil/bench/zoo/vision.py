"""The zoo's vision models: ViT-style and Swin-style transformers (timm), ConvNets old and new and
MobileNet-style small models (torchvision; ConvNeXt from transformers).

Real sizes are the named models as published (ImageNet heads, 1000 classes), nothing capped.
Tiny sizes have 10 classes, images of 32 x 32, and the fewest stages and blocks that keep the
architecture's parts. Images are 64 x 64 for Swin, whose windows must still shift, and for the
ConvNets whose last batch norm would otherwise see 1 x 1 maps of 2 images: training-mode batch
norm over two values is so ill-conditioned that fp32 eager itself strays from fp64 by more than
the twin's tolerance.
"""

from __future__ import annotations

from typing import Any

from coil.bench.zoo.spec import HF, Entry, Timm, Torchvision


def _resnet50_tiny(tv: Any) -> Any:
    """Bottleneck blocks, one per stage, with a quarter of the inner width."""
    return tv.resnet.ResNet(tv.resnet.Bottleneck, [1, 1, 1, 1], width_per_group=16, num_classes=10)


def _regnet_tiny(tv: Any) -> Any:
    """RegNetY's design space (grouped 3x3 convs, squeeze-excitation) at four blocks in three stages."""
    params = tv.regnet.BlockParams.from_init_params(
        depth=4, w_0=8, w_a=8.0, w_m=2.0, group_width=8, se_ratio=0.25)
    return tv.regnet.RegNet(params, num_classes=10, stem_width=8)


def _efficientnet_tiny(tv: Any) -> Any:
    """MBConv blocks (depthwise 3x3 and 5x5, squeeze-excitation, SiLU), one per stage, three stages."""
    conf = tv.efficientnet.MBConvConfig
    setting = [conf(1, 3, 1, 16, 8, 1), conf(6, 3, 2, 8, 16, 1), conf(6, 5, 2, 16, 24, 1)]
    return tv.efficientnet.EfficientNet(setting, dropout=0.0, stochastic_depth_prob=0.0, num_classes=10)


ENTRIES: list[Entry] = [
    Entry("vit_b16", "ViT", "vision",
          "ViT-B/16 (timm vit_base_patch16_224): 12 layers, width 768, 12 heads, class token; "
          "nothing capped",
          Timm("vit_base_patch16_224"),
          Timm("vit_base_patch16_224", dict(img_size=32, patch_size=8, embed_dim=64, depth=2,
                                            num_heads=4, num_classes=10))),
    Entry("deit_s", "DeiT", "vision",
          "DeiT-S distilled (timm deit_small_distilled_patch16_224): 12 layers, width 384, "
          "6 heads, class and distillation tokens with two heads; nothing capped",
          Timm("deit_small_distilled_patch16_224"),
          Timm("deit_small_distilled_patch16_224", dict(img_size=32, patch_size=8, embed_dim=64,
                                                        depth=2, num_heads=4, num_classes=10))),
    Entry("swin_t", "Swin", "vision",
          "Swin-T (timm swin_tiny_patch4_window7_224): windows of 7, shifted every other block, "
          "relative position bias, patch merging, depths 2-2-6-2; nothing capped",
          Timm("swin_tiny_patch4_window7_224"),
          Timm("swin_tiny_patch4_window7_224", dict(img_size=64, patch_size=4, window_size=4,
                                                    embed_dim=32, depths=(2, 2), num_heads=(2, 4),
                                                    num_classes=10)),
          tiny_image=64),
    Entry("resnet50", "ResNet", "vision",
          "ResNet-50 (torchvision resnet50): bottleneck blocks 3-4-6-3, batch norm; nothing capped",
          Torchvision(lambda tv: tv.resnet50()),
          Torchvision(_resnet50_tiny),
          tiny_image=64),
    Entry("regnet_y", "RegNet", "vision",
          "RegNetY-1.6GF (torchvision regnet_y_1_6gf): grouped convs, squeeze-excitation; "
          "nothing capped",
          Torchvision(lambda tv: tv.regnet_y_1_6gf()),
          Torchvision(_regnet_tiny)),
    Entry("efficientnet_b0", "EfficientNet", "vision",
          "EfficientNet-B0 (torchvision efficientnet_b0): MBConv (depthwise, squeeze-excitation, "
          "SiLU), stochastic depth off; nothing capped",
          Torchvision(lambda tv: tv.efficientnet_b0()),
          Torchvision(_efficientnet_tiny)),
    Entry("convnext", "ConvNeXt", "vision",
          "ConvNeXt-T (transformers ConvNextForImageClassification, default config): depthwise "
          "7x7 convs, LayerNorm, layer scale, depths 3-3-9-3; nothing capped",
          HF("ConvNextForImageClassification", "ConvNextConfig", dict(num_labels=1000)),
          # layer scale kept at 0.5, not the real 1e-6 init, so the blocks weigh in the comparison
          HF("ConvNextForImageClassification", "ConvNextConfig", dict(
              num_stages=2, hidden_sizes=[16, 32], depths=[1, 1], layer_scale_init_value=0.5,
              num_labels=10))),
    Entry("mobilenet_v2", "MobileNetV2", "vision",
          "MobileNetV2 (torchvision mobilenet_v2): inverted residuals, depthwise 3x3, ReLU6; "
          "nothing capped",
          Torchvision(lambda tv: tv.mobilenet_v2()),
          Torchvision(lambda tv: tv.MobileNetV2(width_mult=0.25, num_classes=10)),
          tiny_image=64),
    Entry("mobilenet_v3", "MobileNetV3", "vision",
          "MobileNetV3-Large (torchvision mobilenet_v3_large): depthwise 3x3 and 5x5, "
          "squeeze-excitation, hard-swish; nothing capped",
          Torchvision(lambda tv: tv.mobilenet_v3_large()),
          Torchvision(lambda tv: tv.mobilenet_v3_large(width_mult=0.25, num_classes=10)),
          tiny_image=64),
]  # fmt: skip
