// Generates libstdcxx-sort.txt: keys with many ties, and the order in which
// libstdc++'s std::sort and std::partial_sort(first, last, last) leave
// their indexes. TestSortMatchesLibstdcxx holds sortNodes and heapSort to
// it. Build with the g++ that built GEOS (Debian bookworm: g++ 12):
//   g++ -O2 -o sortgen libstdcxx-sort.cpp && ./sortgen > libstdcxx-sort.txt
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

struct N {
  double k;
  int id;
};

static void print(const std::vector<N>& v) {
  for (size_t i = 0; i < v.size(); i++) printf(i ? " %d" : "%d", v[i].id);
  printf("\n");
}

int main() {
  std::mt19937 rng(7);
  for (int t = 0; t < 240; t++) {
    int n = rng() % 120;
    if (t % 60 == 0) n = 600 + rng() % 600;
    int distinct = 1 + rng() % 8;
    std::vector<N> v(n);
    for (int i = 0; i < n; i++) v[i] = N{(double)(rng() % distinct), i};
    if (t % 7 == 1) for (int i = 0; i < n; i++) v[i].k = i % (distinct + 5);
    if (t % 7 == 2) for (int i = 0; i < n; i++) v[i].k = (n - i) / 3;
    if (t % 7 == 3) for (int i = 0; i < n; i++) v[i].k = (i < n / 2) ? i / 2 : (n - i) / 2;
    printf("%d", n);
    for (auto& x : v) printf(" %g", x.k);
    printf("\n");
    std::vector<N> s = v;
    std::sort(s.begin(), s.end(), [](const N& a, const N& b) { return a.k < b.k; });
    print(s);
    std::vector<N> h = v;
    std::partial_sort(h.begin(), h.end(), h.end(), [](const N& a, const N& b) { return a.k < b.k; });
    print(h);
  }
}
