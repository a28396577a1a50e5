// Stand-in for <Foundation/Foundation.h>: only what mps_metal.mm uses.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifndef nil
#define nil nullptr
#endif

typedef unsigned long NSUInteger;
typedef signed char BOOL;
@class Protocol;

@protocol NSObject
- (BOOL)conformsToProtocol:(Protocol*)aProtocol;
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
@end

typedef struct dispatch_queue_s* dispatch_queue_t;
typedef void (^dispatch_block_t)(void);
extern "C" void dispatch_sync(dispatch_queue_t queue, dispatch_block_t block);
