// Stand-in for <Metal/Metal.h>: only what mps_metal.mm uses.
#pragma once
#import <Foundation/Foundation.h>

typedef enum MTLStorageMode : NSUInteger {
  MTLStorageModeShared = 0,
  MTLStorageModeManaged = 1,
  MTLStorageModePrivate = 2,
  MTLStorageModeMemoryless = 3,
} MTLStorageMode;

typedef enum MTLResourceOptions : NSUInteger {
  MTLResourceStorageModeShared = 0,
  MTLResourceStorageModePrivate = 2 << 4,
} MTLResourceOptions;

@protocol MTLResource <NSObject>
@property(readonly) MTLStorageMode storageMode;
@end

@protocol MTLBuffer <MTLResource>
@property(readonly) NSUInteger length;
- (void*)contents;
@end

@protocol MTLEvent <NSObject>
@end

@protocol MTLSharedEvent <MTLEvent>
@property uint64_t signaledValue;
@end

@protocol MTLBlitCommandEncoder <NSObject>
- (void)copyFromBuffer:(id<MTLBuffer>)sourceBuffer
          sourceOffset:(NSUInteger)sourceOffset
              toBuffer:(id<MTLBuffer>)destinationBuffer
     destinationOffset:(NSUInteger)destinationOffset
                  size:(NSUInteger)size;
- (void)endEncoding;
@end

@protocol MTLCommandBuffer <NSObject>
- (void)encodeSignalEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (void)encodeWaitForEvent:(id<MTLEvent>)event value:(uint64_t)value;
- (id<MTLBlitCommandEncoder>)blitCommandEncoder;
- (void)commit;
@end

@protocol MTLCommandQueue <NSObject>
- (id<MTLCommandBuffer>)commandBuffer;
@end

@protocol MTLDevice <NSObject>
- (id<MTLCommandQueue>)newCommandQueue;
- (id<MTLSharedEvent>)newSharedEvent;
- (id<MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;
- (id<MTLBuffer>)newBufferWithBytes:(const void*)pointer
                             length:(NSUInteger)length
                            options:(MTLResourceOptions)options;
@end

extern "C" id<MTLDevice> MTLCreateSystemDefaultDevice(void);
