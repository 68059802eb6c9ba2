"""A witness follows a log's key rotation from its own configuration (docs/architecture.md
§3.9): `vkey` may list the log's keys; a reload swaps them in one assignment and keeps the
state, so the rotated log must continue the tree the witness cosigned."""
from __future__ import annotations

import pytest

from tlog.errors import ConfigError, ConsistencyProofError, Forbidden
from tlog.formats.keys import Signer
from witness.config import WitnessConfig, WitnessedLog
from witness.core import SizeConflict

from tests.support.witness import MemLog, running_witness, witness_config

ORIGIN = "rotating.example/log"


def test_vkey_may_list_a_logs_keys_each_once_and_of_a_log_key_type():
    a, b = Signer.generate(ORIGIN), Signer.generate(ORIGIN)
    cfg = WitnessConfig(logs=[{"origin": ORIGIN, "vkey": [a.vkey, b.vkey]}])
    cfg.validate()
    assert [v.key_id for v in cfg.logs[0].verifiers] == [a.key_id, b.key_id]
    with pytest.raises(ConfigError, match="one key twice"):
        WitnessConfig(logs=[{"origin": ORIGIN, "vkey": [a.vkey, a.vkey]}]).validate()
    with pytest.raises(ConfigError, match="vkey must be a string, or a list"):
        WitnessConfig(logs=[{"origin": ORIGIN, "vkey": []}])
    with pytest.raises(ConfigError, match="vkey must be a string, or a list"):
        WitnessConfig(logs=[{"origin": ORIGIN, "vkey": [a.vkey, 1]}])


async def test_a_reload_moves_the_witness_to_the_new_key_and_the_tree_goes_on(tmp_path):
    under_a = MemLog(ORIGIN, bytes([1]) * 32).grow(4)
    under_b = MemLog(ORIGIN, bytes([2]) * 32, list(under_a.leaves)).grow(4)  # the same tree, on
    only_a = witness_config(tmp_path, [WitnessedLog(ORIGIN, under_a.vkey)])
    async with running_witness(only_a) as (svc, _, _):
        await svc.witness.submit(under_a.body(0, 4))
        with pytest.raises(Forbidden, match="no signature by the key"):
            await svc.witness.submit(under_b.body(4, 6))  # B: not the witness's operator's word yet

        svc.reload_logs(witness_config(tmp_path, [WitnessedLog(ORIGIN, under_a.vkey, extra_vkeys=(under_b.vkey,))]))
        assert (await svc.witness.submit(under_b.body(4, 6))).size == 6  # either key now
        svc.reload_logs(witness_config(tmp_path, [WitnessedLog(ORIGIN, under_b.vkey)]))
        with pytest.raises(Forbidden):
            await svc.witness.submit(MemLog(ORIGIN, under_a.seed, under_b.leaves).body(6, 8))  # A alone: refused now
        # the state outlived both reloads: B cannot restart the log, nor fork it
        with pytest.raises(SizeConflict):
            await svc.witness.submit(under_b.body(0, 8))
        forked = under_b.fork(5, 9).grow(3)
        with pytest.raises(ConsistencyProofError):
            await svc.witness.submit(forked.body(6, 8))
        assert (await svc.witness.submit(under_b.body(6, 8))).size == 8
