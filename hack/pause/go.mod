// Build module for the real node's pause binary (main.go), the pod sandbox's process.
module cronoq.io/hack/pause

go 1.26.0

tool cronoq.io/hack/pause
