"""Open, validate and read the shared region; create one (tests and tools).

Readers never take the region's lock: :meth:`Region.snapshot` copies the whole file in one go
(``pread``, never a mapping) and decodes the copy, so a reader can neither block the processes
of a container nor be blocked by one that died. Each 8-byte field is written atomically by the
shim, so a value is never torn; only fields updated by one call may be seen half-way (for
example a slot's ``used`` updated while the device total is not yet). That is good enough for
metrics.

The file lies in a directory the container can write, so the reader takes it as hostile input:
it opens only a regular file of a sane size, never follows a link, never blocks on the open and
turns a file truncated under it into a :class:`RegionError` (docs/security.md).
"""

from __future__ import annotations

import errno
import os
import stat
import time
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from vslice_core.errors import DecodeError

from vslice_shim import abi


class RegionError(DecodeError):
    """A region file that is missing, short, foreign or of another major version."""


@dataclass(frozen=True)
class DeviceUsage:
    """One device of the container as the region records it."""

    index: int  # the device's index in the container (CUDA_DEVICE_MEMORY_LIMIT_<index>)
    uuid: str  # "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
    memory_limit: int | None  # bytes; None = no memory limit
    memory_used: int  # bytes held by the container's live processes
    sm_limit: int | None  # percent; None = no compute limit
    busy_ns: int  # device busy time measured by the compute limiter
    throttled_ns: int  # host time launches waited for the limiter
    launches: int


@dataclass(frozen=True)
class ProcessSlot:
    """One process of the container that uses (or used) the GPU."""

    slot: int
    pid: int  # pid in the container's pid namespace
    start_time: int  # /proc/<pid>/stat starttime (clock ticks after boot)
    last_seen: float  # unix time of the process's last allocation or free
    memory_used: tuple[int, ...]  # bytes per device index, context overhead included
    context_memory: tuple[int, ...]  # the context overhead part of memory_used


@dataclass(frozen=True)
class RegionSnapshot:
    version: tuple[int, int]
    created: float  # unix time
    lock_recoveries: int
    devices: tuple[DeviceUsage, ...]
    processes: tuple[ProcessSlot, ...]

    def device(self, index: int) -> DeviceUsage:
        for device in self.devices:
            if device.index == index:
                return device
        raise KeyError(index)


def _uuid_text(raw: bytes) -> str:
    return "GPU-" + str(uuidlib.UUID(bytes=raw))


def _device(d: Any) -> DeviceUsage:
    return DeviceUsage(
        index=int(d.index),
        uuid=_uuid_text(bytes(abi.ffi.buffer(d.uuid))),
        memory_limit=int(d.mem_limit) or None,
        memory_used=int(d.mem_used),
        sm_limit=int(d.sm_limit) or None,
        busy_ns=int(d.busy_ns),
        throttled_ns=int(d.throttled_ns),
        launches=int(d.launches),
    )


def _slot(number: int, s: Any, devices: int) -> ProcessSlot:
    return ProcessSlot(
        slot=number,
        pid=int(s.pid),
        start_time=int(s.start_time),
        last_seen=int(s.last_seen_ns) / 1e9,
        memory_used=tuple(int(s.used[i]) for i in range(devices)),
        context_memory=tuple(int(s.ctx[i]) for i in range(devices)),
    )


def _validate(path: str, header: Any, size: int) -> None:
    if int(header.magic) != abi.MAGIC:
        raise RegionError(
            f"{path} is not a vslice region (magic {int(header.magic):#x})",
            field="magic",
            value=int(header.magic),
        )
    if int(header.version_major) != abi.VERSION_MAJOR:
        raise RegionError(
            f"{path} has region version {header.version_major}.{header.version_minor}, "
            f"this reader reads {abi.VERSION_MAJOR}.x",
            field="version_major",
            value=int(header.version_major),
        )
    sizes = (header.header_size, header.device_size, header.slot_size)
    expected = (abi.HEADER_SIZE, abi.DEVICE_SIZE, abi.SLOT_SIZE)
    if tuple(int(v) for v in sizes) != expected:
        raise RegionError(
            f"{path} has structure sizes {tuple(int(v) for v in sizes)}, expected {expected}",
            field="sizes",
            value=sizes,
        )
    if size < abi.REGION_SIZE:
        raise RegionError(
            f"{path} is {size} bytes, a region is {abi.REGION_SIZE}", field="size", value=size
        )


# The shim maps only the region's size and accepts a longer file, so a little slack; a file
# far longer (a sparse file of terabytes) is no region, whatever its first bytes say.
MAX_FILE_SIZE = 4 * 1024 * 1024

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _check_kind(path: str, info: os.stat_result) -> None:
    if stat.S_ISREG(info.st_mode):
        return
    kind = next((text for test, text in _KINDS if test(info.st_mode)), "not a regular file")
    raise RegionError(f"{path} is {kind}, not a region file", field="type", value=kind)


def _open_error(path: str, error: OSError) -> RegionError:
    if error.errno == errno.ELOOP:  # O_NOFOLLOW refused the last component
        return RegionError(
            f"{path} is a symbolic link, not a region file", field="type", value="symlink"
        )
    return RegionError(f"cannot open region {path}: {error.strerror}", field="path", value=path)


_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def _open_regular(path: str) -> int:
    """A descriptor open for reading on the regular file ``path``, never anything else.

    The file lies in a directory the container writes, so ``path`` may name anything: a link
    to a host file, a FIFO (an open that never returns), a device node made with the
    container's CAP_MKNOD (opening some, a watchdog, has effects on the host). The name is
    first opened with ``O_PATH``, which opens nothing, its type checked on that descriptor,
    and the same inode then opened for reading through ``/proc/self/fd``: a swap between the
    check and the open cannot slip another file in. ``O_NONBLOCK`` stays as a second guard.
    """
    try:
        probe = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        raise _open_error(path, error) from error
    try:
        _check_kind(path, os.fstat(probe))
        try:
            return os.open(f"/proc/self/fd/{probe}", _READ)
        except FileNotFoundError:  # no /proc: the checked name, still without following
            return os.open(path, _READ | os.O_NOFOLLOW)
    except OSError as error:
        raise _open_error(path, error) from error
    finally:
        os.close(probe)


def _read(fd: int, path: str, size: int) -> bytes:
    """The first ``size`` bytes of the file, copied with ``pread``.

    Never a mapping: the container can truncate the file at any moment, and a mapping read
    past the new end is SIGBUS, which kills the reader. Here it is a short read.
    """
    data = b""
    try:
        while len(data) < size:
            chunk = os.pread(fd, size - len(data), len(data))
            if not chunk:
                break
            data += chunk
    except OSError as error:
        raise RegionError(
            f"cannot read region {path}: {error.strerror}", field="path", value=path
        ) from error
    if len(data) < size:
        raise RegionError(
            f"{path} was truncated while read: {len(data)} of {size} bytes",
            field="truncated",
            value=len(data),
        )
    return data


class Region:
    """A region file open for reading. Use :func:`open_region` to get one."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd = fd

    def snapshot(self) -> RegionSnapshot:
        """Copy the region and decode the copy: devices in use and processes with a live slot.

        The container may rewrite or truncate the file at any time, so the copy is checked
        again (magic, version, sizes) and a short one is a :class:`RegionError`.
        """
        data = _read(self._fd, self.path, abi.REGION_SIZE)
        region = abi.ffi.cast("vs_region *", abi.ffi.from_buffer(data))
        header = region.header
        _validate(self.path, header, len(data))
        count = min(int(header.device_count), abi.MAX_DEVICES)
        hwm = min(int(header.slot_hwm), abi.MAX_SLOTS)
        return RegionSnapshot(
            version=(int(header.version_major), int(header.version_minor)),
            created=int(header.created_ns) / 1e9,
            lock_recoveries=int(header.recoveries),
            devices=tuple(_device(region.devices[i]) for i in range(count)),
            processes=tuple(
                _slot(i, region.slots[i], count) for i in range(hwm) if region.slots[i].pid != 0
            ),
        )

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Region:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def _check_size(path: str, size: int) -> None:
    if not abi.HEADER_SIZE <= size <= MAX_FILE_SIZE:
        raise RegionError(
            f"{path} is {size} bytes, a region is {abi.REGION_SIZE}", field="size", value=size
        )


def open_region(path: str | os.PathLike[str]) -> Region:
    """Open the region at ``path`` for reading after checking magic, version and size.

    Only a regular file is opened: a symbolic link, FIFO, device, socket or directory at
    ``path`` is refused without being followed or opened, and nothing is ever mapped.
    Raises :class:`RegionError` (a ``vslice_core.errors.DecodeError``) with a one-line message
    for a missing, short, huge, foreign, other-major-version or non-regular file.
    """
    name = os.fspath(path)
    fd = _open_regular(name)
    try:
        info = os.fstat(fd)
        _check_kind(name, info)  # what was opened, not only what was looked at
        _check_size(name, info.st_size)
        header = _read(fd, name, abi.HEADER_SIZE)
        _validate(
            name, abi.ffi.cast("vs_region_header *", abi.ffi.from_buffer(header)), info.st_size
        )
    except BaseException:
        os.close(fd)
        raise
    return Region(name, fd)


@dataclass(frozen=True)
class DeviceLimit:
    """What :func:`create_region` writes for one device."""

    uuid: str
    memory_limit: int = 0  # bytes; 0 = none
    sm_limit: int = 0  # percent; 0 = none


def create_region(
    path: str | os.PathLike[str],
    devices: Sequence[DeviceLimit] = (),
    *,
    version: tuple[int, int] = (abi.VERSION_MAJOR, abi.VERSION_MINOR),
    magic: int = abi.MAGIC,
) -> None:
    """Write a fresh region file (mode 0666) with the given devices and no processes.

    The shim initialises the lock on first attach (``lock_ready`` is left 0). ``version`` and
    ``magic`` exist so tests can write the foreign files the shim must refuse.
    """
    buffer = bytearray(abi.REGION_SIZE)
    region = abi.ffi.cast("vs_region *", abi.ffi.from_buffer(buffer))
    header = region.header
    header.version_major, header.version_minor = version
    header.header_size = abi.HEADER_SIZE
    header.device_size = abi.DEVICE_SIZE
    header.slot_size = abi.SLOT_SIZE
    header.max_devices = abi.MAX_DEVICES
    header.max_slots = abi.MAX_SLOTS
    header.device_count = len(devices)
    header.created_ns = time.time_ns()
    for index, limit in enumerate(devices):
        entry = region.devices[index]
        raw = uuidlib.UUID(limit.uuid.removeprefix("GPU-")).bytes
        abi.ffi.memmove(entry.uuid, raw, 16)
        entry.index = index
        entry.mem_limit = limit.memory_limit
        entry.sm_limit = limit.sm_limit
    header.magic = magic
    # Written beside and renamed into place: a file that is mapped is never truncated under
    # its readers (that would be SIGBUS for them), they keep the old one until they reopen.
    name = os.fspath(path)
    temporary = f"{name}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o666)
    try:
        os.fchmod(fd, 0o666)
        os.write(fd, bytes(buffer))
    finally:
        os.close(fd)
    os.replace(temporary, name)
