// tlogverify reads a C2SP tlog-tiles log over HTTP (a log, or a static copy of its
// bucket) with Go's reference implementation, golang.org/x/mod/sumdb/{note,tlog}, an
// implementation independent of this project, and checks it:
//
//	the checkpoint's signature by the log key (note.Open),
//	the tree hash computed from the tiles (tlog.TreeHash through tlog.TileHashReader,
//	which checks every tile it reads against the checkpoint's root),
//	and, for COUNT random entries, their inclusion (tlog.ProveRecord, tlog.CheckRecord)
//	with each entry's leaf hash computed from its entry bundle (tlog.RecordHash).
//
// Usage: tlogverify BASE_URL VERIFIER_KEY COUNT. Prints "OK size=N checked=K" or exits 1.
package main

import (
	"encoding/base64"
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

func main() {
	if len(os.Args) != 4 {
		fail("usage: tlogverify BASE_URL VERIFIER_KEY COUNT")
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
	fmt.Printf("OK size=%d checked=%d\n", size, checked)
}
