"""Interoperation with other frameworks (optional extras; nothing here loads on ``import
minigrad``).

``minigrad.interop.torch`` checks a PyTorch accumulation loop against full-batch training
(``check_accumulation``); it needs the ``minigrad[torch]`` extra.
"""
