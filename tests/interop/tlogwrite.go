// tlogwrite writes a static C2SP tlog-tiles log with Go's reference implementation,
// golang.org/x/mod/sumdb/{note,tlog}, an implementation independent of this project:
// the stored hashes (tlog.StoredHashes), the hash tiles a growing tree publishes
// (tlog.NewTiles, tlog.ReadTileData), the entry bundles of those level-0 tiles
// (big-endian uint16 length-prefixed entries, C2SP tlog-tiles) and the checkpoint
// (C2SP tlog-checkpoint) signed with note.Sign.
//
// Usage: tlogwrite DIR SIGNER_KEY SIZE...
// Grows the log through each SIZE in turn (publishing the tiles each growth needs, as a
// log does); entry i is "go entry <i>\n". The key name is the origin. Prints "OK size=N".
package main

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL "+format+"\n", args...)
	os.Exit(1)
}

func write(dir, path string, data []byte) {
	p := filepath.Join(dir, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		fail("%v", err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		fail("%v", err)
	}
}

func entry(i int64) []byte { return []byte(fmt.Sprintf("go entry %d\n", i)) }

func main() {
	if len(os.Args) < 4 {
		fail("usage: tlogwrite DIR SIGNER_KEY SIZE...")
	}
	dir := os.Args[1]
	signer, err := note.NewSigner(os.Args[2])
	if err != nil {
		fail("signer key: %v", err)
	}
	var stored []tlog.Hash
	hr := tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		for i, x := range indexes {
			if x < 0 || x >= int64(len(stored)) {
				return nil, fmt.Errorf("no stored hash %d", x)
			}
			out[i] = stored[x]
		}
		return out, nil
	})
	var size int64
	for _, arg := range os.Args[3:] {
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || n < size {
			fail("sizes must grow: %q", arg)
		}
		for i := size; i < n; i++ {
			hs, err := tlog.StoredHashes(i, entry(i), hr)
			if err != nil {
				fail("stored hashes of %d: %v", i, err)
			}
			stored = append(stored, hs...)
		}
		for _, t := range tlog.NewTiles(8, size, n) {
			data, err := tlog.ReadTileData(t, hr)
			if err != nil {
				fail("tile %v: %v", t, err)
			}
			rest := strings.TrimPrefix(t.Path(), "tile/8/") // Go names tile/8/L/N, C2SP tile/L/N
			write(dir, "tile/"+rest, data)
			if t.L == 0 {
				var bundle []byte
				for i := t.N * 256; i < t.N*256+int64(t.W); i++ {
					e := entry(i)
					bundle = binary.BigEndian.AppendUint16(bundle, uint16(len(e)))
					bundle = append(bundle, e...)
				}
				write(dir, "tile/entries/"+strings.TrimPrefix(rest, "0/"), bundle)
			}
		}
		size = n
	}
	root, err := tlog.TreeHash(size, hr)
	if err != nil {
		fail("tree hash: %v", err)
	}
	text := fmt.Sprintf("%s\n%d\n%s\n", signer.Name(), size, base64.StdEncoding.EncodeToString(root[:]))
	msg, err := note.Sign(&note.Note{Text: text}, signer)
	if err != nil {
		fail("sign: %v", err)
	}
	write(dir, "checkpoint", msg)
	fmt.Printf("OK size=%d\n", size)
}
