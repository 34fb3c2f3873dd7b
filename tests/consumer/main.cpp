// Uses an installed ember through its umbrella header: multiplies two small matrices
// and checks the product. Exits 0 on success, 1 with a message otherwise.
#include <ember.h>

#include <cstdio>
#include <exception>
#include <vector>

int main() {
  try {
    // [2, 3] @ [3, 2] = [[58, 64], [139, 154]]
    ember::Tensor a = ember::tensor({1, 2, 3, 4, 5, 6}, {2, 3});
    ember::Tensor b = ember::tensor({7, 8, 9, 10, 11, 12}, {3, 2});
    ember::Tensor c = ember::matmul(a, b);
    const std::vector<double> expected = {58, 64, 139, 154};
    if (c.shape() != ember::Shape{2, 2}) {
      std::fprintf(stderr, "consumer: matmul gave shape %s, expected [2, 2]\n", ember::shape_str(c.shape()).c_str());
      return 1;
    }
    std::vector<double> got = c.to_vector<double>();
    for (size_t i = 0; i < expected.size(); ++i) {
      if (got[i] != expected[i]) {
        std::fprintf(stderr, "consumer: element %zu is %g, expected %g\n", i, got[i], expected[i]);
        return 1;
      }
    }
    // Errors cross the library boundary as ember::Error.
    bool threw = false;
    try {
      ember::matmul(a, a);
    } catch (const ember::Error&) {
      threw = true;
    }
    if (!threw) {
      std::fprintf(stderr, "consumer: matmul of [2, 3] by [2, 3] did not throw ember::Error\n");
      return 1;
    }
    std::printf("consumer: ok, %s\n", c.str().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
