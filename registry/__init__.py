"""OAP Registry (OAP-CORE-1.0 §22, §28.5, §31, §32.6; docs/architecture.md §5-6): see registry/README.md.

Pure: layout, records, sortedtree, statuslist, statusverify, anchoring (verifiers).
Storage: store (dulwich), index, history. Services: writer, batcher, status,
service, api, githttp, mirror. CLI: cli (`oap-registry`).
"""
