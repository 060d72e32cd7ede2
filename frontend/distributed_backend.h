// trnsim._C.forwarding_backend: the c10d Backend of trnsim.distributed's process group (distributed_backend.cpp).
#pragma once

#include <pybind11/pybind11.h>

namespace trnsim::frontend {
void bind_distributed_backend(pybind11::module_& m);
}
