"""The widths batches are padded to before they reach a compiled graph: each width is a shape MindSpore compiles
a graph for, so few widths mean few compiles and more padding, many widths the reverse."""


def bucket(n: int, minimum: int = 8) -> int:
    """The padded width a batch of longest row ``n`` is compiled for: a power of two from ``minimum`` up."""
    b = minimum
    while b < n:
        b *= 2
    return b


def padded_width(n: int, multiple: int = 0, minimum: int = 8) -> int:
    """The width rows of longest ``n`` are padded to: :func:`bucket` (a power of two from ``minimum``, few shapes to
    compile), or with ``multiple`` > 0 the next multiple of it (TRL's pad_to_multiple_of: less padding, a graph per
    width met)."""
    return max(-(-n // multiple) * multiple, multiple) if multiple > 0 else bucket(n, minimum)
