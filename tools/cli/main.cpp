// trnsim: the command line. Subcommand groups live in their own files; this only wires them.
#include <iostream>

#include "config/config_tree.h"
#include "tools/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"trnsim: cycle-approximate simulator of AWS Trainium2/Trainium3"};
  app.require_subcommand(1);
  int exit_code = 0;
  trnsim::cli::add_config_commands(app, exit_code);
  trnsim::cli::add_run_command(app, exit_code);
  trnsim::cli::add_bench_commands(app, exit_code);
  trnsim::cli::add_replay_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const trnsim::ConfigError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of host memory (the simulation needs more than this machine can give it)\n";
    return 1;
  } catch (const std::exception& e) {
    // Anything a command did not turn into its own message still ends as one, never as a terminate.
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return exit_code;
}
