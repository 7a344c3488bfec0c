// Command nullextender is the cheapest scheduler extender that still does what the vslice
// extender does for kube-scheduler: a filter that keeps one candidate node and a bind that
// posts the pod's Binding to the API server. benchmarks/scheduling.py runs it beside the
// vslice extender, on a resource of its own, so that kube-scheduler's and the API server's
// cost of the extender protocol itself (each pod and its candidates encoded to JSON, two
// HTTPS calls per pod, the Binding written by someone other than kube-scheduler) is measured
// rather than estimated: its pods per second is the ceiling any extender reaches on the same
// machine.
//
// It uses the Go standard library alone, so the benchmark builds it where it runs and no
// built file is kept in the repository.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"time"
)

// filterArgs is the part of kube-scheduler's ExtenderArgs this extender reads; with
// nodeCacheCapable the candidates come as names. The pod is left undecoded.
type filterArgs struct {
	NodeNames []string `json:"NodeNames"`
}

// filterResult is kube-scheduler's ExtenderFilterResult.
type filterResult struct {
	NodeNames                  []string          `json:"NodeNames"`
	FailedNodes                map[string]string `json:"FailedNodes"`
	FailedAndUnresolvableNodes map[string]string `json:"FailedAndUnresolvableNodes"`
	Error                      string            `json:"Error"`
}

// bindArgs is kube-scheduler's ExtenderBindingArgs.
type bindArgs struct {
	PodName      string `json:"PodName"`
	PodNamespace string `json:"PodNamespace"`
	PodUID       string `json:"PodUID"`
	Node         string `json:"Node"`
}

// bindResult is kube-scheduler's ExtenderBindingResult.
type bindResult struct {
	Error string `json:"Error"`
}

type extender struct {
	apiserver string
	client    *http.Client
}

func (e *extender) filter(w http.ResponseWriter, r *http.Request) {
	var args filterArgs
	result := filterResult{FailedNodes: map[string]string{}, FailedAndUnresolvableNodes: map[string]string{}}
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		result.Error = fmt.Sprintf("nullextender: filter arguments: %v", err)
	} else if len(args.NodeNames) == 0 {
		result.Error = "nullextender: no candidate node names (is nodeCacheCapable set?)"
	} else {
		// One node, as the vslice extender answers: kube-scheduler then scores one node.
		result.NodeNames = args.NodeNames[:1]
	}
	reply(w, result)
}

func (e *extender) bind(w http.ResponseWriter, r *http.Request) {
	var args bindArgs
	if err := json.NewDecoder(r.Body).Decode(&args); err != nil {
		reply(w, bindResult{Error: fmt.Sprintf("nullextender: bind arguments: %v", err)})
		return
	}
	reply(w, bindResult{Error: e.post(args)})
}

// post writes the pod's Binding; the answer is "" or why it failed.
func (e *extender) post(args bindArgs) string {
	binding := map[string]any{
		"apiVersion": "v1",
		"kind":       "Binding",
		"metadata":   map[string]any{"name": args.PodName, "uid": args.PodUID},
		"target":     map[string]any{"apiVersion": "v1", "kind": "Node", "name": args.Node},
	}
	body, err := json.Marshal(binding)
	if err != nil {
		return err.Error()
	}
	target := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/binding",
		e.apiserver, url.PathEscape(args.PodNamespace), url.PathEscape(args.PodName))
	response, err := e.client.Post(target, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Sprintf("nullextender: binding %s/%s: %v", args.PodNamespace, args.PodName, err)
	}
	defer response.Body.Close()
	text, _ := io.ReadAll(response.Body) // read to the end so the connection is reused
	if response.StatusCode != http.StatusCreated && response.StatusCode != http.StatusOK {
		return fmt.Sprintf("nullextender: binding %s/%s: HTTP %d: %s",
			args.PodNamespace, args.PodName, response.StatusCode, bytes.TrimSpace(text))
	}
	return ""
}

func reply(w http.ResponseWriter, value any) {
	body, err := json.Marshal(value)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to serve HTTPS on")
	certFile := flag.String("cert", "", "serving certificate (PEM)")
	keyFile := flag.String("key", "", "serving key (PEM)")
	apiserver := flag.String("apiserver", "", "API server URL, https://host:port")
	caFile := flag.String("ca", "", "CA that signed the API server's certificate (PEM)")
	clientCert := flag.String("client-cert", "", "client certificate towards the API server")
	clientKey := flag.String("client-key", "", "client key towards the API server")
	flag.Parse()
	required := []struct{ name, value string }{
		{"-cert", *certFile}, {"-key", *keyFile}, {"-apiserver", *apiserver}, {"-ca", *caFile},
		{"-client-cert", *clientCert}, {"-client-key", *clientKey},
	}
	for _, flag := range required {
		if flag.value == "" {
			fmt.Fprintf(os.Stderr, "nullextender: %s is required\n", flag.name)
			os.Exit(2)
		}
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatalf("nullextender: -ca: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		log.Fatalf("nullextender: -ca %s holds no PEM certificate", *caFile)
	}
	pair, err := tls.LoadX509KeyPair(*clientCert, *clientKey)
	if err != nil {
		log.Fatalf("nullextender: -client-cert/-client-key: %v", err)
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}},
		ForceAttemptHTTP2:   true, // one multiplexed connection, as client-go uses
		MaxIdleConnsPerHost: 64,
	}
	e := &extender{apiserver: *apiserver, client: &http.Client{Transport: transport, Timeout: 30 * time.Second}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /filter", e.filter)
	mux.HandleFunc("POST /bind", e.bind)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	server := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Printf("nullextender: serving on https://%s, binding through %s", *listen, *apiserver)
	log.Fatal(server.ListenAndServeTLS(*certFile, *keyFile))
}
