//go:build ignore

// gencrs writes ../../builtin_crs.json: the PROJJSON of the EPSG codes
// warehouse.BuiltinCRS knows without PROJ, as PROJ itself writes them.
// Run from package warehouse: go generate (needs PROJ and cgo).
package main

import (
	"bytes"
	"encoding/json"
	"log"
	"os"
	"strconv"

	"github.com/geodlq/geodlq/warehouse/projcrs"
)

// codes are the CRSs most dead letters are in: WGS 84, Web Mercator, and
// the continental datums GeoJSON producers declare.
var codes = []int{4326, 3857, 4258, 4269}

func main() {
	r := projcrs.New()
	out := map[string]json.RawMessage{}
	for _, c := range codes {
		v, err := r.Resolve(c)
		if err != nil {
			log.Fatal(err)
		}
		out[strconv.Itoa(c)] = v
	}
	b, err := json.MarshalIndent(out, "", " ")
	if err != nil {
		log.Fatal(err)
	}
	var buf bytes.Buffer
	buf.Write(b)
	buf.WriteByte('\n')
	if err := os.WriteFile("builtin_crs.json", buf.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
