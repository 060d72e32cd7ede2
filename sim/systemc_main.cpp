// libsystemc references sc_main, which a program normally provides. trnsim drives the kernel
// with sc_start() from its own main, so this one is never called. It is compiled into every
// executable that links trnsim_sim (an INTERFACE source), since a static library member that
// nothing else references would not be linked. Exported even from a module built with hidden
// visibility (the PyTorch device, trnsim._C), where libsystemc resolves it when the module loads.
extern "C" __attribute__((visibility("default"))) int sc_main(int, char**) { return 1; }
