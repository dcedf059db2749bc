"""The BPF object through libbpf (ctypes on Debian's libbpf.so.1) and BPF_PROG_TEST_RUN.

libbpf does what a hand-written ELF loader would otherwise have to: BTF-defined
maps (the spin lock in the queue map needs the map's BTF), map relocations and
program load with the verifier. pyroute2 cannot load an ELF object, and
``tc filter ... bpf obj`` would load a copy whose maps this process could only
reach through pinning or ``bpftool``; holding the program and map fds here
lets the loader attach the program with pyroute2 and read the counters with
one ``bpf_map_lookup_elem`` each, nothing pinned.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from testbed.fabric.switch.build import object_path
from testbed.fabric.switch.config import EgressConfig
from testbed.model.errors import TestbedFailure

PROGRAM = "mrc_egress"
COUNTERS = ("passed", "marked", "trimmed", "dropped")
TC_ACT_OK, TC_ACT_SHOT, TC_ACT_REDIRECT = 0, 2, 7
SK_BUFF_BYTES = 192
"""sizeof(struct __sk_buff) on 6.x kernels; ctx in/out of BPF_PROG_TEST_RUN."""
SK_BUFF_MARK, SK_BUFF_PRIORITY = 8, 32
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")


class SwitchLoadError(TestbedFailure):
    """libbpf is missing, or the kernel refused the object (the errno is in the message)."""


class _TestRunOpts(ctypes.Structure):
    """struct bpf_test_run_opts, libbpf 1.x bpf.h."""

    _fields_ = [("sz", ctypes.c_size_t), ("data_in", ctypes.c_void_p), ("data_out", ctypes.c_void_p),
                ("data_size_in", ctypes.c_uint32), ("data_size_out", ctypes.c_uint32),
                ("ctx_in", ctypes.c_void_p), ("ctx_out", ctypes.c_void_p),
                ("ctx_size_in", ctypes.c_uint32), ("ctx_size_out", ctypes.c_uint32),
                ("retval", ctypes.c_uint32), ("repeat", ctypes.c_int), ("duration", ctypes.c_uint32),
                ("flags", ctypes.c_uint32), ("cpu", ctypes.c_uint32), ("batch_size", ctypes.c_uint32)]


@lru_cache(maxsize=1)
def libbpf() -> ctypes.CDLL:
    """Debian's libbpf.so.1 with the prototypes used here. Raises SwitchLoadError."""
    name = ctypes.util.find_library("bpf") or "libbpf.so.1"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SwitchLoadError(f"libbpf not found ({exc}); install libbpf-dev (make setup)") from None
    vp, cp, ci = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for fn, res, args in (("bpf_object__open_file", vp, [cp, vp]), ("bpf_object__load", ci, [vp]),
                          ("bpf_object__close", None, [vp]),
                          ("bpf_object__find_program_by_name", vp, [vp, cp]), ("bpf_program__fd", ci, [vp]),
                          ("bpf_object__find_map_by_name", vp, [vp, cp]), ("bpf_map__fd", ci, [vp]),
                          ("bpf_map_lookup_elem", ci, [ci, vp, vp]),
                          ("bpf_map_update_elem", ci, [ci, vp, vp, ctypes.c_uint64]),
                          ("bpf_prog_test_run_opts", ci, [ci, ctypes.POINTER(_TestRunOpts)])):
        getattr(lib, fn).restype = res
        getattr(lib, fn).argtypes = args
    return lib


def _err(what: str, rc: int | None = None) -> SwitchLoadError:
    code = -rc if rc is not None and rc < 0 else ctypes.get_errno()
    return SwitchLoadError(f"{what}: {os.strerror(code)} (errno {code})")


@dataclass(frozen=True)
class TestRun:
    """One BPF_PROG_TEST_RUN: return code, output frame, skb mark and priority after the run."""

    retval: int
    frame: bytes
    mark: int
    priority: int


class EgressProgram:
    """One loaded instance of the egress program: its own maps, so its own queues and counters.

    Holds the program fd and the map fds (dup'ed; the libbpf object is closed at once).
    :meth:`close` releases them; an attached filter keeps the program and maps alive.
    Raises SwitchLoadError (libbpf missing, verifier or map errors), SwitchBuildError.
    """

    def __init__(self, config: EgressConfig, obj_path: Path | None = None):
        lib = libbpf()
        path = str(obj_path or object_path()).encode()
        obj = lib.bpf_object__open_file(path, None)
        if not obj:
            raise _err(f"bpf_object__open_file({path.decode()})")
        self.fds: dict[str, int] = {}
        try:
            rc = lib.bpf_object__load(obj)
            if rc:
                raise _err("loading the egress program (verifier log on stderr)", rc)
            prog = lib.bpf_object__find_program_by_name(obj, PROGRAM.encode())
            self.fds["prog"] = os.dup(lib.bpf_program__fd(prog))
            for name in ("cfg", "vqs", "counters"):
                self.fds[name] = os.dup(lib.bpf_map__fd(lib.bpf_object__find_map_by_name(obj, name.encode())))
        except BaseException:
            self.close()
            raise
        finally:
            lib.bpf_object__close(obj)
        self.config = config
        self._update("cfg", 0, config.pack())

    @property
    def prog_fd(self) -> int:
        return self.fds["prog"]

    def reconfigure(self, config: EgressConfig) -> None:
        """Replace the config map's value (a link's rate changed: the virtual queues drain at
        the new rate from the next packet on); queues and counters are kept."""
        self._update("cfg", 0, config.pack())
        self.config = config

    def _update(self, name: str, key: int, value: bytes) -> None:
        k, v = ctypes.c_uint32(key), ctypes.create_string_buffer(value, len(value))
        rc = libbpf().bpf_map_update_elem(self.fds[name], ctypes.byref(k), v, 0)
        if rc:
            raise _err(f"bpf_map_update_elem({name}[{key}])", rc)

    def _lookup(self, name: str, key: int, size: int) -> bytes:
        k, v = ctypes.c_uint32(key), ctypes.create_string_buffer(size)
        rc = libbpf().bpf_map_lookup_elem(self.fds[name], ctypes.byref(k), v)
        if rc:
            raise _err(f"bpf_map_lookup_elem({name}[{key}])", rc)
        return v.raw

    def counters(self) -> dict[str, int]:
        """{"passed", "marked", "trimmed", "dropped"}: packets since load (marked within passed)."""
        return {name: _U64.unpack(self._lookup("counters", i, 8))[0] for i, name in enumerate(COUNTERS)}

    def test_run(self, frame: bytes, *, mark: int = 0, priority: int = 0) -> TestRun:
        """Run the program once on an Ethernet ``frame`` (BPF_PROG_TEST_RUN, no device)."""
        size_out = len(frame) + 256
        data_in, data_out = ctypes.create_string_buffer(frame, len(frame)), ctypes.create_string_buffer(size_out)
        ctx = bytearray(SK_BUFF_BYTES)
        _U32.pack_into(ctx, SK_BUFF_MARK, mark)
        _U32.pack_into(ctx, SK_BUFF_PRIORITY, priority)
        ctx_in = ctypes.create_string_buffer(bytes(ctx), SK_BUFF_BYTES)
        ctx_out = ctypes.create_string_buffer(SK_BUFF_BYTES)
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts), data_in=ctypes.addressof(data_in),
                            data_out=ctypes.addressof(data_out), data_size_in=len(frame),
                            data_size_out=size_out, ctx_in=ctypes.addressof(ctx_in),
                            ctx_out=ctypes.addressof(ctx_out), ctx_size_in=SK_BUFF_BYTES,
                            ctx_size_out=SK_BUFF_BYTES, repeat=1)
        rc = libbpf().bpf_prog_test_run_opts(self.prog_fd, ctypes.byref(opts))
        if rc:
            raise _err("BPF_PROG_TEST_RUN", rc)
        out = ctx_out.raw
        return TestRun(opts.retval, data_out.raw[:opts.data_size_out], _U32.unpack_from(out, SK_BUFF_MARK)[0],
                       _U32.unpack_from(out, SK_BUFF_PRIORITY)[0])

    def close(self) -> None:
        """Close every fd (idempotent)."""
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)

    def __enter__(self) -> EgressProgram:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
