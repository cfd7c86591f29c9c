// promqlcheck reads PromQL expressions, one per line, and prints each that Prometheus's own
// parser refuses, with the error; it exits 1 if any was refused. tests/chart builds it (cached
// in ~/.cache/cronoq) to check the chart's alert rules and the dashboard's queries.
package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	refused := 0
	scanner := bufio.NewScanner(os.Stdin)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		if _, err := parser.ParseExpr(scanner.Text()); err != nil {
			fmt.Printf("%s\t%v\n", scanner.Text(), err)
			refused++
		}
	}
	if err := scanner.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if refused > 0 {
		os.Exit(1)
	}
}
