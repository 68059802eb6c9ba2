// staticserve serves a directory over HTTP/1.1 on 127.0.0.1 (a free port, printed first) with
// Go's net/http FileServer: a static host of the kind that serves tlog-tiles logs (a bucket's
// web endpoint, a CDN origin), for benchmarks/monitoring.py. Usage: staticserve DIR
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	http.Serve(ln, http.FileServer(http.Dir(os.Args[1])))
}
