/* Core clock by a dependent add chain: one add per cycle on every x86/ARM core of the last decade, so
   adds/second = the clock the core ran at (turbo included), which a VM's cpu model string hides. */
#include <stdio.h>
#include <time.h>
#include <stdint.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){
  double best=0;
  for(int r=0;r<5;r++){
    uint64_t x=r, n=400000000ULL;
    double t0=now();
    for(uint64_t i=0;i<n;i+=8){
      __asm__ volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0":"+r"(x));
    }
    double ghz=n/(now()-t0)/1e9; if(ghz>best)best=ghz;
  }
  printf("%.3f\n",best);
  return 0;
}
