"""The zoo models coil does not compile correctly yet on the CPU (Triton's interpreter), each with
the error it fails with: strict xfails, so a fix shows as XPASS and its line must go.

Keys are (model, "inference" | "training"); the reason is the failure's first line as seen, and
what is known of its cause.
"""

from __future__ import annotations

KNOWN: dict[tuple[str, str], str] = {
    ("mobilenet_v2", "training"): (
        "gradient of features.1.conv.2.weight: Tensor-likes are not close! (2 / 8 elements, "
        "greatest absolute difference 8.7e-4, 2.8e-4 allowed). Against an fp64 run, coil's "
        "gradients and loss are up to 5x (loss: 35x) further off than eager's. Not a layer's "
        "rounding: compiled one block at a time, forward and backward are as close to fp64 as "
        "eager's; the whole tiny network amplifies rounding (batch norm over 8 values a channel "
        "in its last blocks), and over six inputs coil's logits error is 0.64-2.29x eager's"
    ),
}
