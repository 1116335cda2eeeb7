/* engine/cli/main.c — entry point of build/numla. Everything is a registered subcommand
 * (engine/cli/cli.h): `numla run`, `numla synth`, `numla bench ...`, `numla topo`, ... */
int numla_cli_main(int argc, char **argv);

int main(int argc, char **argv) { return numla_cli_main(argc, argv); }
