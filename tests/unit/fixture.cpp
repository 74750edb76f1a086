// Model<TinyCed> and Model<> for the whole unit suite (fixture.hpp declares them extern in dsv41_tests).
#include "fixture.hpp"

namespace dsv41 {
template class Model<configs::TinyCed>;
template class Model<>;
}  // namespace dsv41
