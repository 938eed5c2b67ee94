package validity

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestSortMatchesLibstdcxx holds the STR tree's sort to libstdc++'s: the
// order std::sort (and its heapsort fallback, std::partial_sort) leaves
// equal keys in decides the tree's shape, and with it which fault GEOS
// meets first. testdata/libstdcxx-sort.txt was written by g++ 12 (see
// testdata/libstdcxx-sort.cpp).
func TestSortMatchesLibstdcxx(t *testing.T) {
	f, err := os.Open("testdata/libstdcxx-sort.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	line := func() []string {
		if !sc.Scan() {
			t.Fatalf("truncated fixture: %v", sc.Err())
		}
		return strings.Fields(sc.Text())
	}
	cases := 0
	for sc.Scan() {
		in := strings.Fields(sc.Text())
		n, err := strconv.Atoi(in[0])
		if err != nil || len(in) != n+1 {
			t.Fatalf("case %d: bad line", cases)
		}
		nodes := func() []strNode {
			s := make([]strNode, n)
			for i := range n {
				k, err := strconv.ParseFloat(in[i+1], 64)
				if err != nil {
					t.Fatal(err)
				}
				s[i] = strNode{env: env{minx: k}, item: int32(i)}
			}
			return s
		}
		var tree strTree
		for _, check := range []struct {
			name string
			sort func([]strNode)
		}{
			{"std::sort", func(s []strNode) { tree.sortNodes(s, keyX) }},
			{"std::partial_sort", func(s []strNode) {
				ks := make([]sortKey, len(s))
				for i := range s {
					ks[i] = sortKey{nodeKey(&s[i], keyX), int32(i)}
				}
				heapSort(ks, 0, len(ks))
				tmp := append([]strNode(nil), s...)
				for i, k := range ks {
					s[i] = tmp[k.i]
				}
			}},
		} {
			want := line()
			s := nodes()
			check.sort(s)
			for i := range n {
				if strconv.Itoa(int(s[i].item)) != want[i] {
					t.Fatalf("case %d (%d keys), %s: position %d holds %d, libstdc++ puts %s there", cases, n, check.name, i, s[i].item, want[i])
				}
			}
		}
		cases++
	}
	if cases != 240 {
		t.Fatalf("%d cases, want 240", cases)
	}
}
