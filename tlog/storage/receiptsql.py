"""The receipts index query (`EntryReader.receipts`) of the SQL drivers: one statement for
SQLite and PostgreSQL, so that their filters cannot drift apart."""
from __future__ import annotations


def receipts_query(table: str, mark: str, size: int, *, signer: str | None, receipt_hash: bytes | None,
                   since: float | None, after: int, limit: int) -> tuple[str, tuple[object, ...]]:
    """The SQL and its arguments, for a driver whose placeholder is `mark` ("?" for SQLite,
    "%s" for PostgreSQL)."""
    where: list[str] = [f"idx < {mark}", f"idx > {mark}"]
    args: list[object] = [size, after]
    if since is not None:
        where.append(f"(logged_at >= {mark} OR signed_at >= {mark})")
        args += [since, since]
    if signer is not None:
        where.append(f"signer = {mark}")
        args.append(signer)
    if receipt_hash is not None:
        where.append(f"receipt_hash = {mark}")
        args.append(receipt_hash)
    sql = (f"SELECT signer, idx, receipt_hash, ts, signed_at, logged_at FROM {table} "
           f"WHERE {' AND '.join(where)} ORDER BY idx LIMIT {mark}")
    return sql, (*args, limit)
