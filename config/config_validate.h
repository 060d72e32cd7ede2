// Cross-field rules a single field's range cannot express (PSUM banks x bank bytes equals the
// partition size, one HBM stack per core, torus sizes multiply to the chip count, ...).
#pragma once

#include "config/config_reader.h"

namespace trnsim {

// Throws ConfigError at the location of the offending key; `user_file` is the file the user
// named, whose keys are preferred over inherited ones when a rule involves several.
void validate_hardware_config(const HardwareConfig& config, const detail::LocationMap& locations,
                              const std::string& user_file);

}  // namespace trnsim
