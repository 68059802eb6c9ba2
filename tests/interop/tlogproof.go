// tlogproof writes a C2SP tlog-proof (c2sp.org/tlog-proof@v1) for one entry of a static
// tlog-tiles log on disk (one tests/interop/tlogwrite.go wrote), with Go's reference
// implementation, golang.org/x/mod/sumdb/{note,tlog}, independent of this project: the
// checkpoint is opened with the log's verifier key (note.Open), the inclusion proof is built
// from the log's own tiles (tlog.ProveRecord through tlog.TileHashReader, which checks every
// tile against the checkpoint's root) and checked (tlog.CheckRecord) before it is written.
//
// Usage: tlogproof DIR VERIFIER_KEY INDEX [EXTRA]
// Prints the proof: the format line, "extra <base64 of EXTRA>" when EXTRA is given (opaque
// application data, as the spec allows: here deliberately not the entry), "index N", the
// proof hashes one per line, an empty line and the checkpoint verbatim.
package main

import (
	"encoding/base64"
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

// tiles serves Go's tile reader from the C2SP paths on disk ("tile/L/N"; Go names them
// "tile/8/L/N").
type tiles struct{ dir string }

func (t tiles) Height() int { return 8 }

func (t tiles) ReadTiles(ts []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(ts))
	for i, tile := range ts {
		path := "tile/" + strings.TrimPrefix(tile.Path(), "tile/8/")
		b, err := os.ReadFile(filepath.Join(t.dir, filepath.FromSlash(path)))
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}

func (t tiles) SaveTiles([]tlog.Tile, [][]byte) {}

func main() {
	if len(os.Args) < 4 || len(os.Args) > 5 {
		fail("usage: tlogproof DIR VERIFIER_KEY INDEX [EXTRA]")
	}
	dir := os.Args[1]
	verifier, err := note.NewVerifier(os.Args[2])
	if err != nil {
		fail("verifier key: %v", err)
	}
	index, err := strconv.ParseInt(os.Args[3], 10, 64)
	if err != nil {
		fail("index: %v", err)
	}
	msg, err := os.ReadFile(filepath.Join(dir, "checkpoint"))
	if err != nil {
		fail("%v", err)
	}
	n, err := note.Open(msg, note.VerifierList(verifier))
	if err != nil {
		fail("checkpoint: %v", err)
	}
	lines := strings.SplitN(n.Text, "\n", 4)
	if len(lines) < 4 {
		fail("checkpoint: too few lines")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil {
		fail("checkpoint size: %v", err)
	}
	rootBytes, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(rootBytes) != tlog.HashSize {
		fail("checkpoint root: %v", err)
	}
	var root tlog.Hash
	copy(root[:], rootBytes)
	hr := tlog.TileHashReader(tlog.Tree{N: size, Hash: root}, tiles{dir})
	proof, err := tlog.ProveRecord(size, index, hr)
	if err != nil {
		fail("prove record %d: %v", index, err)
	}
	leaf, err := hr.ReadHashes([]int64{tlog.StoredHashIndex(0, index)})
	if err != nil {
		fail("leaf hash %d: %v", index, err)
	}
	if err := tlog.CheckRecord(proof, size, root, index, leaf[0]); err != nil {
		fail("check record: %v", err)
	}
	var b strings.Builder
	b.WriteString("c2sp.org/tlog-proof@v1\n")
	if len(os.Args) == 5 {
		b.WriteString("extra " + base64.StdEncoding.EncodeToString([]byte(os.Args[4])) + "\n")
	}
	fmt.Fprintf(&b, "index %d\n", index)
	for _, h := range proof {
		b.WriteString(base64.StdEncoding.EncodeToString(h[:]) + "\n")
	}
	b.WriteString("\n")
	b.Write(msg)
	os.Stdout.WriteString(b.String())
}
