"""Compile entity specs into specialised Python decode/encode functions (generated source, exec'd once).

Each (API key, version, request|response) message gets one decoder and one encoder whose bodies
inline every nested struct and array loop, with runs of fixed-width fields packed/unpacked by a
single precompiled `struct.Struct`. Values are plain Python: dicts keyed by kio's snake_case field
names, ints (also for error codes, durations and timestamps in ms), str, bool, float, uuid.UUID,
`bytes` for bytes fields and memoryview slices of the frame for records fields.

Decoders: `decode(buf: memoryview, pos: int, memory=NO_BUDGET, work=NO_BUDGET) -> (dict, end_pos)`.
What a request claims is checked against what it can hold before memory is taken for it: an array
of n elements needs at least n times its element's smallest encoding in the bytes still unread.
The memory the decoded values will take (an estimate: dicts, lists, str and int objects) is
charged to `memory` as each array, string or bytes value is read, and each array's elements to
`work`; a decode that would exceed either raises DecodeBudgetExceeded (`gateway/request_limits.py`
uses both: requests past the memory budget are refused, those past the work budget decoded off
the event loop).
Encoders: `encode(out: bytearray, value: dict, parts: list) -> None`. Any array value may be an
`EncodedArray` (its elements already encoded, e.g. by `element_encoder` as a handler built them):
its bytes are copied in as they are. A records value may be
bytes-like or any object with a `length` attribute (a store FileSlice): then only its length prefix
is written and `(len(out), slice)` is appended to `parts`, so the caller sends the slice's bytes at
that point of the frame (sendfile).
"""

from __future__ import annotations

import copy
import itertools
import struct
import sys
import uuid
from dataclasses import MISSING

from .primitives import (
    NO_BUDGET,
    DecodeBudgetExceeded,
    DecodeError,
    EncodedArray,
    encode_uvarint,
    read_uvarint_tail,
)
from .schema import FIXED, ZERO_UUID, EntitySpec, FieldSpec

_SMALL_ARRAY = 16  # primitive arrays shorter than this use a precompiled Struct per length
_SIZES = {code: struct.calcsize(">" + code) for code in FIXED.values()}


# Memory estimates of decoded values (CPython 64-bit), charged to the decode budget.
_GC_HEADER = 16
_LIST = sys.getsizeof([]) + _GC_HEADER  # plus a pointer per element
_POINTER = 8
_STR = sys.getsizeof("ab") - 2  # plus its length; 0- and 1-character str are shared objects
_BYTES = sys.getsizeof(b"") - 1
_VIEW = sys.getsizeof(memoryview(b""))
_NUMBER = {"float64": sys.getsizeof(0.5), "uuid": sys.getsizeof(ZERO_UUID) + sys.getsizeof(2**127)}
_SMALL_TYPES = ("bool", "int8", "uint8")  # always cached small ints


def _value_cost(f: FieldSpec) -> int:
    """Memory of a fixed-width field's decoded value (an int unless small, a float, a UUID)."""
    if f.kind != "prim" or f.ktype not in FIXED or f.ktype in _SMALL_TYPES:
        return 0
    return _NUMBER.get(f.ktype, sys.getsizeof(2**62))


def element_cost(ent: EntitySpec) -> int:
    """Memory of one decoded element of `ent` without its arrays, strings and bytes (charged
    where they are read): its dict, its numbers, and its non-nullable nested structs."""
    cost = sys.getsizeof(dict.fromkeys(range(len(ent.fields)))) + _GC_HEADER
    for f in ent.fields:
        if f.kind == "struct" and not f.nullable:
            cost += element_cost(f.entity)
        else:
            cost += _value_cost(f)
    return cost


def min_size(ent: EntitySpec) -> int:
    """The fewest bytes one element of `ent` can be encoded in (every array empty, every string
    empty, every nullable null, no tagged field)."""
    return sum(_min_field_size(f, ent.flexible) for f in ent.fields if f.tag is None) + (
        1 if ent.flexible else 0
    )


def _min_field_size(f: FieldSpec, flexible: bool) -> int:
    if f.kind == "struct":
        return 1 if f.nullable else min_size(f.entity)
    if f.kind == "prim" and f.ktype in FIXED:
        return _SIZES[FIXED[f.ktype]]
    if flexible:
        return 1
    return 2 if f.kind == "prim" and f.ktype == "string" else 4


def _default_value(f: FieldSpec) -> object:
    """The decoded value of an absent field (struct defaults are built from the nested entity)."""
    if f.kind == "struct" and f.default is MISSING:
        return {g.name: _default_value(g) for g in f.entity.fields}
    return f.default


class _Src:
    """Accumulates generated lines and the constants they reference."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: dict[str, object] = {}
        self._ids: dict[int, str] = {}
        self._n = 0

    def w(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def var(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}{self._n}"

    def const(self, obj: object) -> str:
        key = id(obj)
        if key not in self._ids:
            name = f"_k{len(self.consts)}"
            self.consts[name] = obj
            self._ids[key] = name
        return self._ids[key]

    def struct_of(self, codes: str) -> str:
        return self.const(_struct(codes))

    def literal(self, value: object) -> str:
        """Source for a default value; mutable ones are copied at each use."""
        if value is None or isinstance(value, bool | int | float | str | bytes):
            return repr(value)
        if isinstance(value, list | dict):
            if not value:
                return "[]" if isinstance(value, list) else "{}"
            items = value.values() if isinstance(value, dict) else value
            if all(v is None or isinstance(v, bool | int | float | str | bytes) for v in items):
                # flat (a tagged struct's default, e.g. Fetch's diverging_epoch): a shallow copy,
                # not a deepcopy per partition decoded
                return f"{type(value).__name__}({self.const(value)})"
            return f"_copy({self.const(value)})"
        return self.const(value)


_struct_cache: dict[str, struct.Struct] = {}


def _struct(codes: str) -> struct.Struct:
    s = _struct_cache.get(codes)
    if s is None:
        s = _struct_cache[codes] = struct.Struct(">" + codes)
    return s


def _is_fixed(f: FieldSpec) -> bool:
    """Fixed-width, untagged: part of a run packed by one Struct (null uuid = zero, null time = -1)."""
    return (
        f.kind == "prim"
        and f.tag is None
        and f.ktype in FIXED
        and (not f.nullable or f.ktype in ("uuid", "datetime_i64"))
    )


# ---------------------------------------------------------------------------------------------
# decoding


def _dec_uvarint(s: _Src, ind: int, var: str) -> None:
    s.w(ind, f"{var} = b[p]")
    s.w(ind, "p += 1")
    s.w(ind, f"if {var} > 127:")
    s.w(ind + 1, f"{var}, p = _ruv(b, p, {var})")


def _dec_length(s: _Src, ind: int, var: str, flexible: bool, wide: bool) -> None:
    """Read a length/count into var; -1 means null."""
    if flexible:
        _dec_uvarint(s, ind, var)
        s.w(ind, f"{var} -= 1")
    elif wide:
        s.w(ind, f"{var} = _i32(b, p)[0]")
        s.w(ind, "p += 4")
    else:
        s.w(ind, f"{var} = _i16(b, p)[0]")
        s.w(ind, "p += 2")


def _dec_prim(s: _Src, ind: int, ktype: str, nullable: bool, flexible: bool, target: str) -> None:
    if ktype in FIXED:
        code = FIXED[ktype]
        s.w(ind, f"{target} = {s.struct_of(code)}.unpack_from(b, p)[0]")
        s.w(ind, f"p += {_SIZES[code]}")
        if ktype == "uuid":
            s.w(ind, f"{target} = _uuid({target})")
        return
    n = s.var("n")
    _dec_length(s, ind, n, flexible, wide=ktype != "string")
    s.w(ind, f"if {n} < 0:")
    s.w(ind + 1, f"{target} = None" if nullable else f"_null({target!r})")
    s.w(ind, "else:")
    q = s.var("q")
    s.w(ind + 1, f"{q} = p + {n}")
    s.w(ind + 1, f"if {q} > L:")
    s.w(ind + 2, "_short()")
    if ktype == "string":
        s.w(ind + 1, f"{target} = str(b[p:{q}], 'utf-8')")
        s.w(ind + 1, f"if {n} > 1:")
        s.w(ind + 2, f"c -= {_STR} + {n}")
    elif ktype == "records":
        s.w(ind + 1, f"{target} = b[p:{q}]")
        s.w(ind + 1, f"c -= {_VIEW}")
    else:
        s.w(ind + 1, f"{target} = bytes(b[p:{q}])")
        s.w(ind + 1, f"c -= {_BYTES} + {n}")
    s.w(ind + 1, f"p = {q}")


def _dec_field(s: _Src, ind: int, f: FieldSpec, flexible: bool, target: str) -> None:
    if f.kind == "prim":
        _dec_prim(s, ind, f.ktype, f.nullable, flexible, target)
        return
    if f.kind == "struct":
        if f.nullable:
            s.w(ind, "p += 1")
            s.w(ind, "if b[p - 1] > 127:")
            s.w(ind + 1, f"{target} = None")
            s.w(ind, "else:")
            _dec_entity(s, ind + 1, f.entity, target)
        else:
            _dec_entity(s, ind, f.entity, target)
        return
    if f.kind == "struct_array":
        least, each = min_size(f.entity), _POINTER + element_cost(f.entity)
    else:
        least = _min_field_size(FieldSpec("", "prim", f.ktype, False, None, None), flexible)
        each = _POINTER + _value_cost(FieldSpec("", "prim", f.ktype, False, None, None))
    n = s.var("n")
    _dec_length(s, ind, n, flexible, wide=True)
    s.w(ind, f"if {n} < 0:")
    s.w(ind + 1, f"{target} = None" if f.nullable else f"_null({target!r})")
    # the count against the bytes left, then the memory its elements will take against the budget
    s.w(ind, f"elif {n} > L - p" + (f" or {n} * {least} > L - p:" if least > 1 else ":"))
    s.w(ind + 1, "_short()")
    s.w(ind, "else:")
    ind += 1
    s.w(ind, f"c -= {_LIST} + {n} * {each}")
    s.w(ind, f"w -= {n} + 1")
    s.w(ind, "if c < 0 or w < 0:")
    s.w(ind + 1, "_over(c, w)")
    if f.kind == "prim_array" and f.ktype in FIXED and f.ktype != "uuid":
        code = FIXED[f.ktype]
        s.w(ind, f"{target} = list(_unpack('>%d{code}' % {n}, b, p))")
        s.w(ind, f"p += {n} * {_SIZES[code]}")
        return
    s.w(ind, f"{target} = []")
    e = s.var("e")
    s.w(ind, f"for _ in range({n}):")
    if f.kind == "prim_array":
        _dec_prim(s, ind + 1, f.ktype, False, flexible, e)
    else:
        _dec_entity(s, ind + 1, f.entity, e)
    s.w(ind + 1, f"{target}.append({e})")


def _layout(ent: EntitySpec) -> tuple[list, list]:
    """An entity's untagged fields in wire order, each run of fixed-size fields grouped into a
    list (one struct.pack/unpack), and its tagged fields by tag: the shape both codecs walk."""
    groups: list = []
    for fixed, fields in itertools.groupby((f for f in ent.fields if f.tag is None), _is_fixed):
        run = list(fields)
        groups.extend([run] if fixed else run)
    tagged = sorted((f for f in ent.fields if f.tag is not None), key=lambda f: f.tag)
    return groups, tagged


def _dec_entity(s: _Src, ind: int, ent: EntitySpec, target: str) -> None:
    names: dict[str, str] = {}
    groups, tagged = _layout(ent)
    for f in groups:
        if isinstance(f, list):  # a run of fixed-size fields: one struct
            run = f
            locs = [s.var("v") for _ in run]
            codes = "".join(FIXED[g.ktype] for g in run)
            st = _struct(codes)
            lhs = ", ".join(locs) + ("," if len(locs) == 1 else "")
            s.w(ind, f"{lhs} = {s.struct_of(codes)}.unpack_from(b, p)")
            s.w(ind, f"p += {st.size}")
            for g, loc in zip(run, locs, strict=True):
                if g.ktype == "uuid":
                    s.w(ind, f"{loc} = _uuid({loc})")
                names[g.name] = loc
            continue
        loc = s.var("v")
        _dec_field(s, ind, f, ent.flexible, loc)
        names[f.name] = loc
    if ent.flexible:
        for f in tagged:
            loc = s.var("v")
            s.w(ind, f"{loc} = {s.literal(_default_value(f))}")
            names[f.name] = loc
        nt = s.var("nt")
        _dec_uvarint(s, ind, nt)
        s.w(ind, f"for _ in range({nt}):")
        tg, sz, q = s.var("tg"), s.var("sz"), s.var("q")
        _dec_uvarint(s, ind + 1, tg)
        _dec_uvarint(s, ind + 1, sz)
        s.w(ind + 1, f"{q} = p + {sz}")
        s.w(ind + 1, f"if {q} > L:")
        s.w(ind + 2, "_short()")
        kw = "if"
        for f in tagged:
            s.w(ind + 1, f"{kw} {tg} == {f.tag}:")
            _dec_field(s, ind + 2, f, True, names[f.name])
            kw = "elif"
        s.w(ind + 1, f"p = {q}")
    items = ", ".join(f"{f.name!r}: {names[f.name]}" for f in ent.fields)
    s.w(ind, f"{target} = {{{items}}}")


# ---------------------------------------------------------------------------------------------
# encoding


def _enc_length(s: _Src, ind: int, buf: str, expr: str, flexible: bool, wide: bool) -> None:
    """Write a non-negative length/count `expr`."""
    if flexible:
        s.w(ind, f"if {expr} < 127:")
        s.w(ind + 1, f"{buf}.append({expr} + 1)")
        s.w(ind, "else:")
        s.w(ind + 1, f"{buf} += _uv({expr} + 1)")
    else:
        s.w(ind, f"{buf} += {'_pi32' if wide else '_pi16'}({expr})")


def _enc_null(s: _Src, ind: int, buf: str, flexible: bool, wide: bool) -> None:
    if flexible:
        s.w(ind, f"{buf}.append(0)")
    else:
        marker = b"\xff" * (4 if wide else 2)
        s.w(ind, f"{buf} += {marker!r}")


def _enc_prim(
    s: _Src, ind: int, ktype: str, nullable: bool, flexible: bool, val: str, buf: str
) -> None:
    if ktype in FIXED:
        code = FIXED[ktype]
        if ktype == "uuid":
            s.w(ind, f"{buf} += ({val} or _ZU).bytes")
        elif ktype == "datetime_i64" and nullable:
            s.w(ind, f"{buf} += {s.struct_of(code)}.pack(-1 if {val} is None else {val})")
        else:
            s.w(ind, f"{buf} += {s.struct_of(code)}.pack({val})")
        return
    wide = ktype != "string"
    if nullable:
        s.w(ind, f"if {val} is None:")
        _enc_null(s, ind + 1, buf, flexible, wide)
        s.w(ind, "else:")
        ind += 1
    n = s.var("n")
    if ktype == "string":
        e = s.var("e")
        s.w(ind, f"{e} = {val}.encode()")
        s.w(ind, f"{n} = len({e})")
        _enc_length(s, ind, buf, n, flexible, wide)
        s.w(ind, f"{buf} += {e}")
    elif ktype == "records":
        s.w(ind, f"if type({val}) in _BYTES or isinstance({val}, _BYTES):")
        s.w(ind + 1, f"{n} = len({val})")
        _enc_length(s, ind + 1, buf, n, flexible, wide)
        s.w(ind + 1, f"{buf} += {val}")
        s.w(ind, "else:")
        s.w(ind + 1, f"{n} = {val}.length")
        _enc_length(s, ind + 1, buf, n, flexible, wide)
        s.w(ind + 1, f"parts.append((len({buf}), {val}))")
    else:
        s.w(ind, f"{n} = len({val})")
        _enc_length(s, ind, buf, n, flexible, wide)
        s.w(ind, f"{buf} += {val}")


def _enc_field(s: _Src, ind: int, f: FieldSpec, flexible: bool, val: str, buf: str) -> None:
    if f.kind == "prim":
        _enc_prim(s, ind, f.ktype, f.nullable, flexible, val, buf)
        return
    if f.kind == "struct":
        if f.nullable:
            s.w(ind, f"if {val} is None:")
            s.w(ind + 1, f"{buf} += b'\\xff'")
            s.w(ind, "else:")
            s.w(ind + 1, f"{buf}.append(1)")
            _enc_entity(s, ind + 1, f.entity, val, buf)
        else:
            s.w(ind, f"if {val} is None:")
            s.w(ind + 1, f"{val} = {{}}")
            _enc_entity(s, ind, f.entity, val, buf)
        return
    if f.nullable:
        s.w(ind, f"if {val} is None:")
        _enc_null(s, ind + 1, buf, flexible, True)
        s.w(ind, f"elif type({val}) is _EA:")
    else:
        s.w(ind, f"if {val} is None:")
        s.w(ind + 1, f"{val} = ()")
        s.w(ind, f"if type({val}) is _EA:")
    s.w(ind + 1, f"_put_ea({buf}, {val}, parts, {flexible})")
    s.w(ind, "else:")
    ind += 1
    n = s.var("n")
    s.w(ind, f"{n} = len({val})")
    _enc_length(s, ind, buf, n, flexible, True)
    if f.kind == "prim_array" and f.ktype in FIXED and f.ktype != "uuid":
        code = FIXED[f.ktype]
        packs = s.const(tuple(struct.Struct(f">{i}{code}").pack for i in range(_SMALL_ARRAY)))
        s.w(ind, f"if {n} < {_SMALL_ARRAY}:")
        s.w(ind + 1, f"{buf} += {packs}[{n}](*{val})")
        s.w(ind, "else:")
        s.w(ind + 1, f"{buf} += _pack('>%d{code}' % {n}, *{val})")
        return
    e = s.var("x")
    s.w(ind, f"for {e} in {val}:")
    if f.kind == "prim_array":
        _enc_prim(s, ind + 1, f.ktype, False, flexible, e, buf)
    else:
        _enc_entity(s, ind + 1, f.entity, e, buf)


def _enc_entity(s: _Src, ind: int, ent: EntitySpec, val: str, buf: str) -> None:
    groups, tagged = _layout(ent)
    for f in groups:
        if isinstance(f, list):  # a run of fixed-size fields: one struct
            run = f
            args = []
            for g in run:
                get = f"{val}.get({g.name!r}, {s.literal(g.default)})"
                if g.ktype == "uuid":
                    get = f"({get} or _ZU).bytes"
                elif g.nullable:  # datetime: null is -1 on the wire
                    t = s.var("t")
                    get = f"(-1 if ({t} := {get}) is None else {t})"
                args.append(get)
            codes = "".join(FIXED[g.ktype] for g in run)
            s.w(ind, f"{buf} += {s.struct_of(codes)}.pack({', '.join(args)})")
            continue
        loc = s.var("v")
        if f.kind == "struct" and f.default is MISSING:
            s.w(ind, f"{loc} = {val}.get({f.name!r})")
        elif f.default == []:
            s.w(ind, f"{loc} = {val}.get({f.name!r}, ())")
        else:
            s.w(ind, f"{loc} = {val}.get({f.name!r}, {s.literal(f.default)})")
        _enc_field(s, ind, f, ent.flexible, loc, buf)
    if not ent.flexible:
        return
    if not tagged:
        s.w(ind, f"{buf}.append(0)")
        return
    cnt, tbuf = s.var("tc"), s.var("tb")
    s.w(ind, f"{cnt} = 0")
    s.w(ind, f"{tbuf} = None")
    for f in tagged:
        loc, fb = s.var("v"), s.var("fb")
        s.w(ind, f"{loc} = {val}.get({f.name!r})")
        default = _default_value(f)
        cond = f"{loc} is not None"
        if default is not None:
            ref = s.const(default) if isinstance(default, list | dict) else s.literal(default)
            cond += f" and {loc} != {ref}"
        s.w(ind, f"if {cond}:")
        s.w(ind + 1, f"if {tbuf} is None:")
        s.w(ind + 2, f"{tbuf} = bytearray()")
        s.w(ind + 1, f"{fb} = bytearray()")
        _enc_field(s, ind + 1, f, True, loc, fb)
        s.w(ind + 1, f"{tbuf} += _uv({f.tag})")
        s.w(ind + 1, f"{tbuf} += _uv(len({fb}))")
        s.w(ind + 1, f"{tbuf} += {fb}")
        s.w(ind + 1, f"{cnt} += 1")
    s.w(ind, f"if {tbuf} is None:")
    s.w(ind + 1, f"{buf}.append(0)")
    s.w(ind, "else:")
    s.w(ind + 1, f"{buf} += _uv({cnt})")
    s.w(ind + 1, f"{buf} += {tbuf}")


# ---------------------------------------------------------------------------------------------


def _short() -> None:
    raise DecodeError("truncated message")


def _over(memory: int, work: int) -> None:
    if memory < 0:
        raise DecodeBudgetExceeded("decoding it would take more memory than its budget", False)
    raise DecodeBudgetExceeded("it has more elements than its work budget", True)


_SEPARATE = 1 << 20  # EncodedArray data this large is sent from its own buffer, not copied in


def _put_encoded(buf: bytearray, arr: EncodedArray, parts: list, flexible: bool) -> None:
    """Write an EncodedArray: its count, then its bytes (file slices keep their place). Large
    data without file slices becomes a part of its own (sent from its buffer, not copied)."""
    n = arr.count
    buf += encode_uvarint(n + 1) if flexible else _I32.pack(n)
    if not arr.parts and len(arr.data) >= _SEPARATE:
        parts.append((len(buf), arr.data))
        return
    for at, sl in arr.parts:
        parts.append((at + len(buf), sl))
    buf += arr.data


def _null(name: str) -> None:
    raise DecodeError(f"non-nullable field {name} was null")


def _uuid(raw: bytes) -> uuid.UUID:
    return ZERO_UUID if raw == b"\0" * 16 else uuid.UUID(bytes=raw)


_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")

_RUNTIME = {
    "_ruv": read_uvarint_tail,
    "_uv": encode_uvarint,
    "_i32": _I32.unpack_from,
    "_i16": _I16.unpack_from,
    "_pi32": _I32.pack,
    "_pi16": _I16.pack,
    "_unpack": struct.unpack_from,
    "_pack": struct.pack,
    "_short": _short,
    "_over": _over,
    "_EA": EncodedArray,
    "_put_ea": _put_encoded,
    "_null": _null,
    "_uuid": _uuid,
    "_ZU": ZERO_UUID,
    "_BYTES": (bytes, bytearray, memoryview),
    "_copy": copy.deepcopy,
}


def _build(s: _Src, name: str):
    ns = dict(_RUNTIME)
    ns.update(s.consts)
    source = "\n".join(s.lines)
    exec(compile(source, f"<kafka codec {name}>", "exec"), ns)  # noqa: S102 - generated from schemas
    fn = ns[name]
    fn.source = source  # kept for debugging and docs
    return fn


def compile_decoder(ent: EntitySpec, name: str = "decode"):
    """Build `decode(buf, pos, memory=NO_BUDGET, work=NO_BUDGET) -> (dict, pos)` for an entity;
    raises DecodeBudgetExceeded when the decoded value would take more than `memory` bytes or
    have more than `work` array elements (arrays count one each too)."""
    s = _Src()
    s.w(0, f"def {name}(b, p, c={NO_BUDGET}, w={NO_BUDGET}):")
    s.w(1, "L = len(b)")
    _dec_entity(s, 1, ent, "r")
    s.w(1, "if c < 0:")
    s.w(2, "_over(c, w)")
    s.w(1, "return r, p")
    return _build(s, name)


def compile_encoder(ent: EntitySpec, name: str = "encode"):
    """Build `encode(out: bytearray, value: dict, parts: list) -> None` for an entity."""
    s = _Src()
    s.w(0, f"def {name}(o, v, parts):")
    _enc_entity(s, 1, ent, "v", "o")
    s.w(1, "return None")
    return _build(s, name)
