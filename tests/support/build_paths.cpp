// SPDX-License-Identifier: Apache-2.0
#include "support/build_paths.hpp"

#if !defined(SLUICE_SOURCE_DIR) || !defined(SLUICE_BINARY)
#error "SLUICE_SOURCE_DIR and SLUICE_BINARY must be defined (tests/CMakeLists.txt)"
#endif

namespace sluice::test {

std::string source_dir() {
    return SLUICE_SOURCE_DIR;
}

std::string built_sluice_binary() {
    return SLUICE_BINARY;
}

} // namespace sluice::test
