"""The explorer: static HTML, CSS and JavaScript (no build step) served under /ui/ by the
log, the witness and the registry (`tlog.http.ui`). The pages verify in the browser,
with WebCrypto, what the services serve: inclusion proofs (RFC 9162), checkpoint
signatures and cosignatures (C2SP signed-note, tlog-cosignature), bundles (C2SP
tlog-proof) and signed revocation-status answers."""
