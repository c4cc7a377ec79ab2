// Command gic-http answers every HTTP request on the address of its first argument
// (default ":8080") with one line naming the host it runs on (a pod's name), for the tests
// of a node's Service routing. A static program with no files of its own, made into an
// image locally like gic-pause.
package main

import (
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	address := ":8080"
	if len(os.Args) > 1 {
		address = os.Args[1]
	}
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "hello from %s\n", host)
	})
	log.Printf("listening on %s", address)
	log.Fatal(http.ListenAndServe(address, nil))
}
