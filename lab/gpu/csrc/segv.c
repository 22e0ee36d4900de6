/* A host-side crash: a NULL request pointer is dereferenced (SIGSEGV). */
#include <stdio.h>
#include <string.h>

struct request { int id; char prompt[64]; };

static int __attribute__((noinline)) prompt_length(const struct request *req) {
  return (int)strlen(req->prompt);  /* FAULT_LINE */
}

int main(void) {
  struct request *lookup[4] = {0};
  printf("looking up request 3\n");
  fflush(stdout);
  printf("prompt length %d\n", prompt_length(lookup[3]));
  return 0;
}
