"""A storage driver driven synchronously through its contract (`tlog.storage.interface`), in
the order the appender drives it: sequence, extend, sign, record the checkpoint, record it
as published. For tests of the drivers themselves; the service runs the real appender."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tlog.merkle.tree import TreeView
from tlog.storage.interface import Driver, Lease, LogState, SignedHead, Signer


@dataclass
class Appended:
    indices: list[int]
    fresh: list[bool]
    leaves: list[bytes]
    state: LogState  # the published checkpoint that covers them


class Writer:
    """One integrator over `driver`: `open` recovers and publishes, `append` appends a batch."""

    def __init__(self, driver: Driver, sign: Signer) -> None:
        self.driver, self.sign = driver, sign
        self.lease: Lease | None = None
        self.state: LogState | None = None

    def open(self) -> LogState:
        self.driver.open()
        self.lease = self.driver.acquire()
        assert self.lease is not None, "another integrator holds the role"
        return self.integrate()

    def integrate(self) -> LogState:
        """Sign and publish everything sequenced (or publish what is signed)."""
        assert self.lease is not None
        d = self.driver
        head = d.head()
        signed = head.signed
        if signed is None or head.sequenced > signed.size:
            root = d.extend(head.sequenced)
            new = SignedHead(head.sequenced, root, self.sign(head.sequenced, root))
            d.record_checkpoint(self.lease, signed.size if signed is not None else None, new)
            signed = new
        else:
            assert d.extend(signed.size) == signed.root
        d.record_published(self.lease, signed.size, signed.note)
        self.state = LogState(signed.size, signed.root, signed.note, TreeView(signed.size, d.hashes.read))
        return self.state

    def append(self, datas: Sequence[bytes]) -> Appended:
        seq = self.driver.sequence(datas)
        state = self.integrate()
        return Appended(seq.indices, seq.fresh, seq.leaves, state)

    def close(self) -> None:
        if self.lease is not None:
            self.driver.release(self.lease)
        self.driver.close()
