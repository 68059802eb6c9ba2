// tlogverify reads a C2SP tlog-tiles log over HTTP (a log, or a static copy of its
// bucket) with Go's reference implementation, golang.org/x/mod/sumdb/{note,tlog}, an
// implementation independent of this project, and checks it:
//
//	the checkpoint's signature by the log key (note.Open),
//	the tree hash computed from the tiles (tlog.TreeHash through tlog.TileHashReader,
//	which checks every tile it reads against the checkpoint's root),
//	and, for COUNT random entries, their inclusion (tlog.ProveRecord, tlog.CheckRecord)
//	with each entry's leaf hash computed from its entry bundle (tlog.RecordHash);
//	with COSIGNER_KEY, also the cosigner's C2SP tlog-cosignature (cosignature/v1, Ed25519)
//	on the checkpoint, checked here with crypto/ed25519 from the spec's message format
//	(a mirror's checkpoint under its monitoring prefix carries one).
//
// Usage: tlogverify BASE_URL VERIFIER_KEY COUNT [COSIGNER_KEY].
// Prints "OK size=N checked=K" (and " cosigned=TIMESTAMP") or exits 1.
package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func get(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return io.ReadAll(resp.Body)
}

// tiles serves Go's tile reader from C2SP paths: Go names a tile "tile/8/L/N",
// C2SP tlog-tiles "tile/L/N" (the height is fixed at 8).
type tiles struct{ base string }

func (t tiles) Height() int { return 8 }

func (t tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, tile := range ts {
		path := "tile/" + strings.TrimPrefix(tile.Path(), "tile/8/")
		b, err := get(t.base + "/" + path)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (t tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func entries(base string, size, index int64) ([]byte, error) {
	n := index / 256
	width := size - n*256
	if width > 256 {
		width = 256
	}
	path := fmt.Sprintf("tile/entries/%s", tlog.Tile{H: 8, L: 0, N: n, W: int(width)}.Path()[len("tile/8/0/"):])
	b, err := get(base + "/" + path)
	if err != nil {
		return nil, err
	}
	for k := int64(0); len(b) >= 2; k++ {
		l := int(b[0])<<8 | int(b[1])
		if len(b) < 2+l {
			return nil, fmt.Errorf("entry bundle %d is truncated", n)
		}
		if n*256+k == index {
			return b[2 : 2+l], nil
		}
		b = b[2+l:]
	}
	return nil, fmt.Errorf("entry %d not in its bundle", index)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL "+format+"\n", args...)
	os.Exit(1)
}

// cosigned checks the cosignature/v1 line of the cosigner COSIGNER_KEY (a vkey of type 0x04,
// or 0x01 for the same Ed25519 key) among the note's other signatures, and returns its timestamp.
func cosigned(n *note.Note, vkey string) uint64 {
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		fail("cosigner key %q is not name+id+key", vkey)
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 33 || (raw[0] != 0x01 && raw[0] != 0x04) {
		fail("cosigner key %q is not an Ed25519 key", vkey)
	}
	name, pub := parts[0], raw[1:]
	h := sha256.Sum256(append([]byte(name+"\n\x04"), pub...))
	id := binary.BigEndian.Uint32(h[:4])
	for _, sig := range n.UnverifiedSigs {
		if sig.Name != name || sig.Hash != id {
			continue
		}
		blob, err := base64.StdEncoding.DecodeString(sig.Base64)
		if err != nil || len(blob) != 4+8+64 {
			fail("cosignature of %s is malformed", name)
		}
		ts := binary.BigEndian.Uint64(blob[4:12])
		msg := fmt.Sprintf("cosignature/v1\ntime %d\n%s", ts, n.Text)
		if !ed25519.Verify(ed25519.PublicKey(pub), []byte(msg), blob[12:]) {
			fail("cosignature of %s does not verify", name)
		}
		return ts
	}
	fail("no cosignature of %s on the checkpoint", name)
	return 0
}

func main() {
	if len(os.Args) != 4 && len(os.Args) != 5 {
		fail("usage: tlogverify BASE_URL VERIFIER_KEY COUNT [COSIGNER_KEY]")
	}
	base, vkey := strings.TrimRight(os.Args[1], "/"), os.Args[2]
	count, _ := strconv.Atoi(os.Args[3])
	v, err := note.NewVerifier(vkey)
	if err != nil {
		fail("verifier key: %v", err)
	}
	msg, err := get(base + "/checkpoint")
	if err != nil {
		fail("checkpoint: %v", err)
	}
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		fail("checkpoint signature: %v", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 || lines[0] != v.Name() {
		fail("checkpoint origin %q is not the key's name %q", lines[0], v.Name())
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("checkpoint size: %v", err)
	}
	raw, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(raw) != 32 {
		fail("checkpoint root: %v", err)
	}
	var root tlog.Hash
	copy(root[:], raw)
	thr := tlog.TileHashReader(tlog.Tree{N: size, Hash: root}, tiles{base})
	th, err := tlog.TreeHash(size, thr)
	if err != nil || th != root {
		fail("tree hash from the tiles: %v (%v != %v)", err, th, root)
	}
	checked := 0
	for i := 0; i < count && size > 0; i++ {
		index := rand.Int63n(size)
		if i == 0 {
			index = size - 1
		}
		data, err := entries(base, size, index)
		if err != nil {
			fail("entry %d: %v", index, err)
		}
		proof, err := tlog.ProveRecord(size, index, thr)
		if err != nil {
			fail("proof of %d: %v", index, err)
		}
		if err := tlog.CheckRecord(proof, size, root, index, tlog.RecordHash(data)); err != nil {
			fail("inclusion of %d: %v", index, err)
		}
		checked++
	}
	if len(os.Args) == 5 {
		fmt.Printf("OK size=%d checked=%d cosigned=%d\n", size, checked, cosigned(n, os.Args[4]))
		return
	}
	fmt.Printf("OK size=%d checked=%d\n", size, checked)
}
