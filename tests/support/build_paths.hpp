// SPDX-License-Identifier: Apache-2.0
#pragma once

// Where the test build found its sources and put the sluice binary. Only build_paths.cpp is
// compiled with these absolute paths: a clone in another folder (CI's) then recompiles that one
// file, and ccache serves every other test source from what this checkout compiled.

#include <string>

namespace sluice::test {

/// The checkout's root (config/, tests/vectors/ ...).
std::string source_dir();

/// The sluice executable this test build made.
std::string built_sluice_binary();

} // namespace sluice::test
