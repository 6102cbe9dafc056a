"""The three operations, one module each: a wire request in, an ``Answer`` with the wire response out.

Each is a short function over the same parts (``Parts``): admit the request, resolve the profile
variant, plan, hold the loaded model (and the request's LoRA), submit through ``Infer``, assemble.
"""
