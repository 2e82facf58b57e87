// The installed header from C++: the consumer of ../consumer.c, compiled as C++17.
#include "../consumer.c"
