"""What one encode request asks of the model, resolved once from profile defaults and request options.

Precedence (as in the public SIE): request ``options`` overlay the profile's ``runtime`` options;
``output_types`` from options beat ``params.output_types`` beat ``["dense"]``; ``params.output_dtype``
beats ``options.output_dtype`` beats float32; ``params.instruction`` beats ``options.instruction``
beats ``default_instruction``. A non-null ``muvera`` option makes ``dense`` a MUVERA vector of the
model's multivector output (the public server's ``muvera`` profiles).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sie.catalog.errors import InvalidInput
from sie.catalog.options import lora_option, overflow_policy, overlay
from sie.core.options import Capability, OutputDType, OutputType, OverflowPolicy, Pooling


@dataclass(frozen=True)
class EncodePlan:
    output_types: tuple[Capability, ...]
    output_dtype: OutputDType
    pooling: Pooling | None
    normalize: bool
    is_query: bool
    instruction: str | None
    query_template: str | None
    doc_template: str | None
    muvera: bool = False  # dense from the multivector (a profile's ``muvera`` option)
    lora: str | None = None  # ``lora_id``: the LoRA adapter to run with
    max_length: int | None = None  # ``query_max_length`` for queries, ``max_seq_length`` else
    overflow: OverflowPolicy = OverflowPolicy.DEFAULT  # ``overflow_policy``: a text past the window

    def shaped(self, text: str, instruction_placed: bool = False) -> str:
        """The text as the model reads it: the query or document template first, else
        ``"{instruction} {text}"`` (the bare text where the family places the instruction itself). One
        rule for the local engine and for an upstream, so both are sent the same words."""
        template = self.query_template if self.is_query else self.doc_template
        if template:
            try:
                return template.format(text=text, instruction=self.instruction or "")
            except (KeyError, IndexError, ValueError) as exc:
                raise InvalidInput(f"Invalid template {template!r}: {exc}") from exc
        return f"{self.instruction} {text}" if self.instruction and not instruction_placed else text


_OUTPUT_TYPES: Final = frozenset(t.value for t in OutputType)


def _typed(options: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = options.get(key, default)
    if value is not None and not isinstance(value, kind):
        raise InvalidInput(f"Option '{key}' must be {kind.__name__}, got {type(value).__name__}")
    return value


def _length(raw: Any) -> int | None:
    """A runtime sequence length as the public server reads it: a positive integer (or a string of
    one); anything else leaves the model's own, never an error."""
    if isinstance(raw, bool):
        return None
    try:
        length = int(raw)
    except (TypeError, ValueError, OverflowError):
        return None
    return length if length > 0 else None


def _output_types(model: str, raw: Sequence[Any], supported: frozenset[Capability]) -> tuple[Capability, ...]:
    """The encode outputs asked for, in the one vocabulary (``Capability``), checked against the
    model's YAML: the loaded adapter gives what its YAML declares (``ops.parts.check_outputs``)."""
    names = [str(v) for v in raw]
    if not _OUTPUT_TYPES.issuperset(names):
        unknown = sorted(set(names) - _OUTPUT_TYPES)
        raise InvalidInput(f"Unknown output types: {unknown}. Allowed: {sorted(_OUTPUT_TYPES)}")
    wanted = tuple(dict.fromkeys(Capability(n) for n in names))
    if not supported.issuperset(wanted):
        declared = {c.value for c in supported}
        raise InvalidInput(
            f"Model '{model}' does not support output types: {set(names) - declared}. "
            f"Supported: {declared or set()}"
        )
    return wanted


def plan_encode(
    model: str,
    supported: frozenset[Capability],
    runtime: Mapping[str, Any],
    request_options: Mapping[str, Any] | None,
    *,
    output_types: Sequence[str] | None = None,
    output_dtype: str | None = None,
    instruction: str | None = None,
) -> EncodePlan:
    """``output_types``, ``output_dtype`` and ``instruction`` are the request's own fields (encode's
    ``params``); a score by similarity passes the outputs its mode reads."""
    options = overlay(runtime, request_options)
    raw_types = _typed(options, "output_types", list, None) or output_types or ["dense"]
    dtype_name = output_dtype or _typed(options, "output_dtype", str, None) or OutputDType.FLOAT32
    try:
        output_dtype = OutputDType(dtype_name)
    except ValueError:
        allowed = ", ".join(d.value for d in OutputDType)
        raise InvalidInput(f"Unknown output_dtype '{dtype_name}'. Allowed: {allowed}") from None
    pooling_name = _typed(options, "pooling", str, None)
    try:
        pooling = Pooling.parse(pooling_name) if pooling_name else None
    except ValueError as exc:
        raise InvalidInput(str(exc)) from None
    instruction = instruction or _typed(options, "instruction", str, None)
    muvera = options.get("muvera") is not None
    is_query = bool(_typed(options, "is_query", bool, False))
    if muvera:  # the model's MUVERA stage produces the dense output from its multivectors
        supported = supported | {Capability.DENSE}
    return EncodePlan(
        output_types=_output_types(model, raw_types, supported),
        output_dtype=output_dtype,
        pooling=pooling,
        normalize=_typed(options, "normalize", bool, True),
        is_query=is_query,
        instruction=instruction or _typed(options, "default_instruction", str, None),
        query_template=_typed(options, "query_template", str, None),
        doc_template=_typed(options, "doc_template", str, None),
        muvera=muvera,
        lora=lora_option(options),
        max_length=_length(options.get("query_max_length" if is_query else "max_seq_length")),
        overflow=overflow_policy(options),
    )
